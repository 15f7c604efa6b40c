export { decideFairShare } from '../binding'
