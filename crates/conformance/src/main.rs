//! `dsh-conformance`: `dsh` plus the fixture plugins of upstream's snapshot suite, for the
//! conformance ratchet and tests (`dsh-conformance acp --compositions conformance/compositions`).

use std::process::ExitCode;

fn main() -> ExitCode {
    dsh_cli::main(&dsh_cli::Extensions {
        plugins: Some(dsh_conformance::register_fixtures),
    })
}
