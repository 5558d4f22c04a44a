//! A fixture of upstream's snapshot suite (`partial-landlock-sandbox`): a provider whose
//! "runner" is deterministic, so recorded scenarios classify runner output the same on
//! every host. With `DSH_SNAPSHOT_MISSING_SANDBOX_RUNNER=1` the runner program does not
//! exist (the spawn fails); otherwise it prints the partial-enforcement notice and execs
//! the command.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;

use dsh_kernel::{BoxError, BoxFuture, Context, Plugin, PluginConfig};

use dsh_sandbox::landlock::PARTIAL_LINE;
use dsh_sandbox::runner::{Confined, Enforcement, RunnerFailureRule, SandboxUnavailable};
use dsh_sandbox::{ExecutionPolicy, Sandbox, SandboxProvider};

struct PartialLandlockFixture {
    missing_runner: bool,
}

impl SandboxProvider for PartialLandlockFixture {
    fn confine(
        &self,
        argv: Vec<OsString>,
        policy: ExecutionPolicy,
    ) -> BoxFuture<'static, Result<Confined, SandboxUnavailable>> {
        let confined = if self.missing_runner {
            Confined {
                program: policy.workspace_root.join(".dsh-missing-sandbox-runner"),
                args: argv,
                serve_args: None,
                enforcement: Enforcement::Full,
                denial_signatures: vec!["permission denied".into()],
                runner_failure_rules: vec![RunnerFailureRule {
                    allowed_exit_codes: Vec::new(),
                    fatal_signatures: vec!["snapshot-runner: ".into()],
                    informational_lines: Vec::new(),
                }],
                runner: "snapshot-missing-runner",
            }
        } else {
            let mut args: Vec<OsString> = vec![
                "-c".into(),
                format!("printf '%s\\n' '{PARTIAL_LINE}' >&2; exec \"$@\"").into(),
                "partial-landlock-run".into(),
            ];
            args.extend(argv);
            Confined {
                program: PathBuf::from("bash"),
                args,
                serve_args: None,
                enforcement: Enforcement::Partial,
                denial_signatures: vec!["permission denied".into()],
                runner_failure_rules: vec![RunnerFailureRule {
                    allowed_exit_codes: vec![125],
                    fatal_signatures: vec!["landlock-run: ".into()],
                    informational_lines: vec![PARTIAL_LINE.into()],
                }],
                runner: "snapshot-partial-landlock",
            }
        };
        Box::pin(async move { Ok(confined) })
    }
}

/// `@deepseek-ai/dsh-test-partial-landlock-sandbox`.
pub struct PartialLandlockFixturePlugin;

impl Plugin for PartialLandlockFixturePlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-test-partial-landlock-sandbox"
    }

    fn apply(&self, ctx: &Context, _config: &PluginConfig) -> Result<(), BoxError> {
        let missing_runner =
            std::env::var("DSH_SNAPSHOT_MISSING_SANDBOX_RUNNER").as_deref() == Ok("1");
        ctx.provide(Arc::new(Sandbox(Arc::new(PartialLandlockFixture {
            missing_runner,
        }))))?;
        Ok(())
    }
}
