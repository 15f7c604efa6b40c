export { decideFairShare } from '../index'
