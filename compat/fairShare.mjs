import entry from './fairShare.js'

export const {
  decideFairShare,
} = entry
