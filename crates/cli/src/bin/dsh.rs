//! `dsh`: the DeepSeek Harness launcher (the application lives in the library).

fn main() -> std::process::ExitCode {
    dsh_cli::main(&dsh_cli::Extensions::default())
}
