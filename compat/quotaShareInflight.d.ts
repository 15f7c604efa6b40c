export { DEFAULT_LEASE_MS, incrementInflight, decrementInflight, getInflight, _clearInflightForTest, _inflightSizeForTest } from '../binding'
