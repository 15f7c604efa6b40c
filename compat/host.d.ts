export { installHost } from '../index'
