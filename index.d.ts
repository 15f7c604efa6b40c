// Types of the main entry: everything binding.d.ts (generated from the Rust doc comments)
// declares, plus the JavaScript-side functions of lib/.
export * from './binding'
export * from './lib/quotaShareStrategy'
export * from './lib/quotaShareConcurrency'
