export { decideFairShare } from '../lib/fairShare'
