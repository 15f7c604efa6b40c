import entry from './planRegistry.js'

export const {
  getKnownPlan,
  knownProviders,
} = entry
