import entry from './host.js'

export const {
  installHost,
} = entry
