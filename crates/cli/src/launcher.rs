//! The launcher's own flags. They must come before everything else: at the first token the
//! launcher does not recognise the app's arguments begin, and they reach the booted tree
//! unchanged (a single leading `--` is dropped).

/// What to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    Version,
    Help,
    Profile {
        profile: String,
        patches: Vec<String>,
        args: Vec<String>,
    },
    Dump {
        profile: String,
        default_only: bool,
        patches: Vec<String>,
    },
    Acp {
        args: Vec<String>,
    },
    Sessions {
        args: Vec<String>,
    },
    Plugin {
        args: Vec<String>,
    },
}

/// A usage error (printed as `error: <message>`, exit 1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageError(pub String);

fn usage(msg: impl Into<String>) -> UsageError {
    UsageError(msg.into())
}

pub const HELP: &str = "\
Usage: dsh [options] [command] [args...]

dsh: boot a DeepSeek Harness profile (a composed tree of plugins) and run its app.

Arguments:
  args                   app arguments, passed to the booted profile

Options:
  -V, --version          print the version and exit
  --profile <name>       the profile to boot ($DSH_HOME/profiles/<name>; headless, web)
  --patch <path>         an extra patch layer, applied last (repeatable)
  --dump-config          print the composed config tree and exit
  --dump-default-config  print the bundled default tree (bundle layers only) and exit

Commands:
  acp [args...]          serve the Agent Client Protocol on stdio
  sessions [args...]     list, show, fork and export stored sessions
  plugin [args...]       add, remove and list external plugins of a profile
  headless [args...]     the headless app: one task, the answer on stdout (short for
                         --profile headless; `dsh headless --help` for its options)
  web [args...]          short for --profile web

Limits (environment variables, in bytes; past one, the error names it):
  DSH_MAX_CONFIG_BYTES     each settings, credentials, .env, profile or patch file
                           (default 16 MiB)
  DSH_MAX_TASK_BYTES       a task read from standard input with `-` (default 16 MiB)
  DSH_MAX_LOG_FRAME_BYTES  what one frame of a compressed session log may inflate to
                           (default 256 MiB)
  DSH_MAX_LOG_BYTES        what a whole compressed session log may inflate to (default
                           256 bytes per stored byte, between 64 MiB and 4 GiB)

Examples:
  dsh headless \"fix the failing test\"
  dsh headless --session-id <id> \"continue\"
  dsh headless --json \"run the tests\"
  dsh headless - < task.txt
  dsh --dump-config --profile headless
  dsh sessions list
  dsh acp
";

/// Parses the launcher arguments (without the program name).
pub fn parse(argv: &[String]) -> Result<Mode, UsageError> {
    let mut profile: Option<String> = None;
    let mut patches = Vec::new();
    let (mut dump, mut dump_default, mut version) = (false, false, false);
    let mut i = 0;
    let take_value =
        |i: &mut usize, flag: &str, inline: Option<&str>| -> Result<String, UsageError> {
            match inline {
                Some(v) => Ok(v.to_string()),
                None => {
                    *i += 1;
                    argv.get(*i)
                        .cloned()
                        .ok_or_else(|| usage(format!("option '{flag}' argument missing")))
                }
            }
        };
    while i < argv.len() {
        let tok = argv[i].as_str();
        let (flag, inline) = match tok.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v)),
            _ => (tok, None),
        };
        match flag {
            "-V" | "--version" => version = true,
            "--profile" => {
                let v = take_value(&mut i, "--profile <name>", inline)?;
                if v.is_empty() {
                    return Err(usage("--profile needs a name"));
                }
                profile = Some(v);
            }
            "--patch" => {
                let v = take_value(&mut i, "--patch <path>", inline)?;
                if v.is_empty() {
                    return Err(usage("--patch needs a path"));
                }
                patches.push(v);
            }
            "--dump-config" => dump = true,
            "--dump-default-config" => dump_default = true,
            _ => break,
        }
        i += 1;
    }
    if version {
        return Ok(Mode::Version);
    }
    let mut rest: Vec<String> = argv[i..].to_vec();
    if rest.first().map(String::as_str) == Some("--") {
        rest.remove(0);
    } else if profile.is_none() && !dump && !dump_default && patches.is_empty() {
        match rest.first().map(String::as_str) {
            Some("acp") => {
                return Ok(Mode::Acp {
                    args: rest[1..].to_vec(),
                });
            }
            Some("sessions") => {
                return Ok(Mode::Sessions {
                    args: rest[1..].to_vec(),
                });
            }
            Some("plugin") => {
                return Ok(Mode::Plugin {
                    args: rest[1..].to_vec(),
                });
            }
            _ => {}
        }
    } else if matches!(
        rest.first().map(String::as_str),
        Some("acp" | "sessions" | "plugin")
    ) {
        return Err(usage(format!(
            "{} takes none of --profile, --patch, --dump-config or --dump-default-config",
            rest[0]
        )));
    }
    // Upstream 0.2's short forms: `dsh headless …`, `dsh web …` (launcher flags may precede).
    if profile.is_none()
        && let Some(short @ ("web" | "headless")) = rest.first().map(String::as_str)
    {
        profile = Some(short.into());
        rest.remove(0);
    }
    if dump && dump_default {
        return Err(usage(
            "--dump-config and --dump-default-config are mutually exclusive",
        ));
    }
    let Some(profile) = profile else {
        if rest.iter().any(|a| a == "-h" || a == "--help") || argv.is_empty() {
            return Ok(Mode::Help);
        }
        return Err(usage("--profile <name> is required"));
    };
    if dump || dump_default {
        if !rest.is_empty() {
            let quoted: Vec<String> = rest
                .iter()
                .map(|a| serde_json::to_string(a).unwrap_or_default())
                .collect();
            return Err(usage(format!(
                "config dumps take no app arguments, got {}",
                quoted.join(" ")
            )));
        }
        if dump_default && !patches.is_empty() {
            return Err(usage(
                "--dump-default-config prints the bundle layers and takes no --patch",
            ));
        }
        return Ok(Mode::Dump {
            profile,
            default_only: dump_default,
            patches,
        });
    }
    Ok(Mode::Profile {
        profile,
        patches,
        args: rest,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn p(args: &[&str]) -> Result<Mode, UsageError> {
        parse(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn launcher_flags_then_app_args() {
        assert_eq!(
            p(&["--profile", "headless", "--patch=a.yml", "fix", "--it"]),
            Ok(Mode::Profile {
                profile: "headless".into(),
                patches: vec!["a.yml".into()],
                args: vec!["fix".into(), "--it".into()]
            })
        );
        assert_eq!(
            p(&["--profile", "x", "--", "--foo"]),
            Ok(Mode::Profile {
                profile: "x".into(),
                patches: vec![],
                args: vec!["--foo".into()]
            })
        );
        assert_eq!(
            p(&["--profile", "x", "a", "--", "b"]),
            Ok(Mode::Profile {
                profile: "x".into(),
                patches: vec![],
                args: vec!["a".into(), "--".into(), "b".into()]
            })
        );
        assert_eq!(p(&["-V"]), Ok(Mode::Version));
        assert_eq!(p(&["-h"]), Ok(Mode::Help));
        assert_eq!(p(&["acp"]), Ok(Mode::Acp { args: vec![] }));
        assert_eq!(
            p(&["--patch", "a.yml", "headless", "--json", "go"]),
            Ok(Mode::Profile {
                profile: "headless".into(),
                patches: vec!["a.yml".into()],
                args: vec!["--json".into(), "go".into()]
            })
        );
        assert_eq!(
            p(&["--profile", "headless", "headless"]),
            Ok(Mode::Profile {
                profile: "headless".into(),
                patches: vec![],
                args: vec!["headless".into()]
            }),
            "after --profile, `headless` is the task"
        );
        assert_eq!(
            p(&["sessions", "list"]),
            Ok(Mode::Sessions {
                args: vec!["list".into()]
            })
        );
        assert_eq!(
            p(&["plugin", "--profile", "web", "list"]),
            Ok(Mode::Plugin {
                args: vec!["--profile".into(), "web".into(), "list".into()]
            })
        );
    }

    #[test]
    fn usage_errors_read_like_upstream() {
        assert_eq!(p(&["task"]), Err(usage("--profile <name> is required")));
        assert_eq!(p(&["--profile", ""]), Err(usage("--profile needs a name")));
        assert_eq!(p(&["--patch="]), Err(usage("--patch needs a path")));
        assert_eq!(
            p(&["--profile"]),
            Err(usage("option '--profile <name>' argument missing"))
        );
        assert_eq!(
            p(&["--profile", "h", "--dump-config", "--dump-default-config"]),
            Err(usage(
                "--dump-config and --dump-default-config are mutually exclusive"
            ))
        );
        assert_eq!(
            p(&["--profile", "h", "--dump-config", "task", "a b"]),
            Err(usage(
                "config dumps take no app arguments, got \"task\" \"a b\""
            ))
        );
        assert_eq!(
            p(&["--profile", "h", "--dump-default-config", "--patch", "x"]),
            Err(usage(
                "--dump-default-config prints the bundle layers and takes no --patch"
            ))
        );
    }
}
