//! The small Landlock launcher: the same contract as `dsh __dsh-landlock …` (see
//! `dsh_sandbox::landlock`), in a binary that carries nothing else, so a confined command
//! pays for Landlock and one small exec instead of loading the whole `dsh` binary. `dsh`
//! uses it when it sits beside the `dsh` executable and falls back to itself otherwise.

fn main() -> std::process::ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    // Accept the hidden argument too, so the two launchers take identical command lines.
    let rest = match args.first() {
        Some(first) if first == dsh_sandbox::landlock::LAUNCHER_ARG => &args[1..],
        _ => &args[..],
    };
    dsh_sandbox::landlock::launcher_main(rest)
}
