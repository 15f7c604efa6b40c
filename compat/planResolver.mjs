import entry from './planResolver.js'

export const {
  resolvePlan,
} = entry
