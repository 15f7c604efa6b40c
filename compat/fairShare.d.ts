export { decideFairShare } from '../binding'
export type { FairShareDimension, FairShareAllocation, FairShareInput, FairShareDecision } from '../binding'
