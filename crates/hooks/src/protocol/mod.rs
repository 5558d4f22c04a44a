//! The dialect-neutral hook protocol: matchers, running a command hook, decoding its
//! outcome, merging several outcomes, and the durable `hook/*` events. Payloads,
//! environment, matcher mode and the mapping onto interception points belong to the
//! bridges.

mod codec;
mod events;
mod matcher;
mod merge;
mod process;
mod runner;

pub use codec::{BLOCKING_EXIT_CODE, HookDecision, HookOutput, js_trim, parse_hook_output};
pub use events::{
    DEFAULT_STDERR_SUMMARY_MAX_CHARS, HookDialect, HookInvocation, append_hook_invoked,
    append_hook_result, invoked_data, result_data, summarize_stderr,
};
pub use matcher::{InvalidMatcher, Matcher, MatcherMode, matches_matcher};
pub use merge::{MergedDecision, MergedOutcome, merge_hook_outputs};
pub use process::{GRACE, MAX_OUTPUT_BYTES, ProcessOutcome, ProcessSpec, run_process};
pub use runner::{
    CommandHook, DEFAULT_HOOK_TIMEOUT_MS, HookRun, HookRunResult, MAX_HOOK_TIMEOUT_MS,
    StdinFraming, child_env, effective_timeout, run_hook,
};
