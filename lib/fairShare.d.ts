// decideFairShare is declared with the engine's checked entry, which lib/fairShare.js falls
// back to and whose signature it has.
export { decideFairShare } from '../binding'
