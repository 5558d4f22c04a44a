//! The launcher's own flags. They must come before everything else: at the first token the
//! launcher does not recognise the app's arguments begin, and they reach the booted tree
//! unchanged (a single leading `--` is dropped).

/// Which config dump to print.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dump {
    /// `--dump-config`: the composed tree.
    Config,
    /// `--dump-default-config`: the bundle layers only.
    Default,
    /// `--dump-config-schema`: the JSON Schema of the tree and its patches.
    Schema,
}

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
        what: Dump,
        patches: Vec<String>,
    },
    Acp {
        args: Vec<String>,
    },
    Sessions {
        args: Vec<String>,
    },
    Memory {
        args: Vec<String>,
    },
    Plugin {
        args: Vec<String>,
    },
    Models {
        args: Vec<String>,
    },
    /// `dsh worker …`, `dsh serve …` and `dsh team …`: sessions in a PostgreSQL team store.
    Team {
        command: String,
        args: Vec<String>,
    },
    /// `--from-default-profile <template>`: recreate the custom profile `profile` from a
    /// shipped template, then do `then` (boot it or dump its config).
    Recreate {
        profile: String,
        template: String,
        then: Box<Mode>,
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
  --profile <name>       the profile to boot ($DSH_HOME/profiles/<name>; shipped: headless,
                         web, tui, sdk, sdk-minimal, acp)
  --patch <path>         an extra patch layer, applied last (repeatable; also accepted
                         among the app's arguments: dsh headless --patch extra.yml \"task\")
  --dump-config          print the composed config tree and exit
  --dump-default-config  print the bundled default tree (bundle layers only) and exit
  --dump-config-schema   print a JSON Schema of the composed tree and of patches, with the
                         config keys each row's plugin takes, and exit
  --from-default-profile <template>
                         recreate the custom profile from a shipped template (headless,
                         web, sdk, sdk-minimal, acp) before booting it; the previous
                         folder is kept beside it (dsh rescue --from-default-profile web)

Commands:
  acp [args...]          serve the Agent Client Protocol on stdio for editors (the acp
                         profile; `dsh acp --help`)
  sessions [args...]     list, show, fork and export stored sessions
  memory [args...]       list, show, add, edit, forget and accept memories (the project's
                         .dsh/memory.md and $DSH_HOME/memory.md; `dsh memory --help`)
  plugin [args...]       add, remove and list external plugins of a profile
  models [args...]       the model routes and models configured (`--probe` asks the
                         endpoints; `dsh models --help`)
  worker [options]       run sessions from a PostgreSQL team store, one turn at a time
                         under a lease (`dsh worker --help`)
  serve [options]        an HTTP gateway to the team store: accounts, sessions, input and
                         event streams resumed by Last-Event-ID (`dsh serve --help`)
  team <command>         the team store: queue input, read a session's events, add
                         accounts (`dsh team --help`)
  headless [args...]     the headless app: one task, the answer on stdout (short for
                         --profile headless; `dsh headless --help` for its options)
  web [args...]          short for --profile web
  tui [args...]          the terminal UI: talk to dsh turn by turn (short for --profile
                         tui; `dsh` alone on a terminal opens it; `dsh tui --help`)
  <profile> [args...]    short for --profile <profile> when the profile exists (or is
                         shipped: sdk, sdk-minimal)

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
  dsh memory list
  dsh acp
";

/// The value of a launcher flag at `args[*i]`: inline (`--flag=v`) or the next argument
/// (then `*i` moves past it). Missing or empty values are usage errors.
fn flag_value(
    args: &[String],
    i: &mut usize,
    inline: Option<&str>,
    flag: &str,
    what: &str,
) -> Result<String, UsageError> {
    let v = match inline {
        Some(v) => v.to_string(),
        None => {
            *i += 1;
            args.get(*i)
                .cloned()
                .ok_or_else(|| usage(format!("option '{flag} <{what}>' argument missing")))?
        }
    };
    if v.is_empty() {
        return Err(usage(format!("{flag} needs a {what}")));
    }
    Ok(v)
}

/// Parses the launcher arguments (without the program name), knowing only the shipped
/// profile names.
#[cfg(test)]
pub fn parse(argv: &[String]) -> Result<Mode, UsageError> {
    parse_with(argv, &|name| crate::profile::is_template(name))
}

/// App flags that take a value as the next argument: a launcher flag is never looked for in
/// that value (`dsh headless --session-id --patch` keeps `--patch` as the id).
const APP_VALUE_FLAGS: &[&str] = &[
    "--session-id",
    "--resume",
    "--output-format",
    "--host",
    "--port",
    "--public-url",
    "--trusted-host",
    "--tls-cert",
    "--tls-key",
];

/// Parses the launcher arguments (without the program name). `is_profile` says whether a
/// bare first word names a profile (`dsh sdk --help`, `dsh rescue` for a custom profile).
pub fn parse_with(argv: &[String], is_profile: &dyn Fn(&str) -> bool) -> Result<Mode, UsageError> {
    let mut profile: Option<String> = None;
    let mut patches = Vec::new();
    let (mut dump, mut dump_default, mut dump_schema, mut version) = (false, false, false, false);
    let mut from_default: Option<String> = None;
    let mut i = 0;
    while i < argv.len() {
        let tok = argv[i].as_str();
        let (flag, inline) = match tok.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v)),
            _ => (tok, None),
        };
        match flag {
            "-V" | "--version" => version = true,
            "--profile" => profile = Some(flag_value(argv, &mut i, inline, flag, "name")?),
            "--patch" => patches.push(flag_value(argv, &mut i, inline, flag, "path")?),
            "--dump-config" => dump = true,
            "--dump-default-config" => dump_default = true,
            "--dump-config-schema" => dump_schema = true,
            "--from-default-profile" => {
                from_default = Some(flag_value(argv, &mut i, inline, flag, "name")?);
            }
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
    } else if profile.is_none()
        && !dump
        && !dump_default
        && !dump_schema
        && patches.is_empty()
        && from_default.is_none()
    {
        if let Some(mode) = subcommand(&rest) {
            return Ok(mode);
        }
    } else if matches!(
        rest.first().map(String::as_str),
        Some("acp" | "sessions" | "memory" | "plugin" | "models" | "worker" | "team" | "serve")
    ) {
        return Err(usage(format!(
            "{} takes none of --profile, --patch, --dump-config or --dump-default-config",
            rest[0]
        )));
    }
    // Upstream 0.2's short forms: `dsh headless …`, `dsh web …`, `dsh <profile> …`
    // (launcher flags may precede).
    if profile.is_none()
        && let Some(short) = rest.first()
        && !short.starts_with('-')
        && (short == "web"
            || short == "headless"
            || is_profile(short)
            || rest
                .iter()
                .any(|a| a == "--from-default-profile" || a.starts_with("--from-default-profile=")))
    {
        profile = Some(short.clone());
        rest.remove(0);
    }
    // Launcher flags are accepted among the app's arguments too, as upstream 0.2's usage
    // line shows (`dsh headless --patch extra.yml "task"`); after a `--` everything is the
    // app's.
    if profile.is_some() {
        let mut flags = AppLauncherFlags {
            patches: &mut patches,
            dump: &mut dump,
            dump_default: &mut dump_default,
            dump_schema: &mut dump_schema,
            from_default: &mut from_default,
        };
        rest = take_launcher_flags(&rest, &mut flags)?;
    }
    if [dump, dump_default, dump_schema]
        .iter()
        .filter(|d| **d)
        .count()
        > 1
    {
        return Err(usage(
            "--dump-config, --dump-default-config and --dump-config-schema are mutually exclusive",
        ));
    }
    let Some(profile) = profile else {
        if rest.iter().any(|a| a == "-h" || a == "--help") || argv.is_empty() {
            return Ok(Mode::Help);
        }
        return Err(usage("--profile <name> is required"));
    };
    if dump || dump_default || dump_schema {
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
        return Ok(recreating(
            from_default,
            Mode::Dump {
                profile,
                what: if dump_default {
                    Dump::Default
                } else if dump_schema {
                    Dump::Schema
                } else {
                    Dump::Config
                },
                patches,
            },
        ));
    }
    Ok(recreating(
        from_default,
        Mode::Profile {
            profile,
            patches,
            args: rest,
        },
    ))
}

/// `dsh <subcommand> …`: the commands that take no profile.
fn subcommand(rest: &[String]) -> Option<Mode> {
    let (first, args) = rest.split_first()?;
    let args = args.to_vec();
    Some(match first.as_str() {
        "acp" => Mode::Acp { args },
        "sessions" => Mode::Sessions { args },
        "memory" => Mode::Memory { args },
        "plugin" => Mode::Plugin { args },
        "models" => Mode::Models { args },
        command @ ("worker" | "team" | "serve") => Mode::Team {
            command: command.to_string(),
            args,
        },
        _ => return None,
    })
}

/// The launcher's own flags, as found among an app's arguments.
struct AppLauncherFlags<'a> {
    patches: &'a mut Vec<String>,
    dump: &'a mut bool,
    dump_default: &'a mut bool,
    dump_schema: &'a mut bool,
    from_default: &'a mut Option<String>,
}

/// Takes the launcher's flags out of an app's arguments (upstream 0.2's usage line shows
/// `dsh headless --patch extra.yml "task"`) and returns the rest; after a `--` everything
/// is the app's.
fn take_launcher_flags(
    rest: &[String],
    flags: &mut AppLauncherFlags<'_>,
) -> Result<Vec<String>, UsageError> {
    let mut kept = Vec::with_capacity(rest.len());
    let mut j = 0;
    while j < rest.len() {
        let tok = rest[j].as_str();
        let (flag, inline) = match tok.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v)),
            _ => (tok, None),
        };
        match flag {
            "--" => {
                kept.extend(rest[j..].iter().cloned());
                break;
            }
            "--patch" => flags
                .patches
                .push(flag_value(rest, &mut j, inline, flag, "path")?),
            "--dump-config" if inline.is_none() => *flags.dump = true,
            "--dump-default-config" if inline.is_none() => *flags.dump_default = true,
            "--dump-config-schema" if inline.is_none() => *flags.dump_schema = true,
            "--from-default-profile" => {
                *flags.from_default = Some(flag_value(rest, &mut j, inline, flag, "name")?);
            }
            "--profile" => {
                return Err(usage(
                    "--profile goes before the app's arguments (dsh --profile <name> [args...])",
                ));
            }
            f if inline.is_none() && APP_VALUE_FLAGS.contains(&f) => {
                kept.push(rest[j].clone());
                if let Some(v) = rest.get(j + 1) {
                    kept.push(v.clone());
                    j += 1;
                }
            }
            _ => kept.push(rest[j].clone()),
        }
        j += 1;
    }
    Ok(kept)
}

/// `mode`, first recreating its profile from `template` when one was named.
fn recreating(template: Option<String>, mode: Mode) -> Mode {
    let profile = match &mode {
        Mode::Profile { profile, .. } | Mode::Dump { profile, .. } => profile.clone(),
        _ => return mode,
    };
    match template {
        Some(template) => Mode::Recreate {
            profile,
            template,
            then: Box::new(mode),
        },
        None => mode,
    }
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
    fn launcher_flags_among_the_app_arguments() {
        let run = |patches: &[&str], args: &[&str]| {
            Ok(Mode::Profile {
                profile: "headless".into(),
                patches: patches.iter().map(|s| s.to_string()).collect(),
                args: args.iter().map(|s| s.to_string()).collect(),
            })
        };
        assert_eq!(
            p(&["headless", "--patch", "f.yml", "do it"]),
            run(&["f.yml"], &["do it"])
        );
        assert_eq!(
            p(&[
                "--patch",
                "a.yml",
                "headless",
                "--json",
                "--patch=b.yml",
                "go"
            ]),
            run(&["a.yml", "b.yml"], &["--json", "go"])
        );
        // A value of an app flag and everything after `--` stay the app's.
        assert_eq!(
            p(&[
                "headless",
                "--session-id",
                "--patch",
                "go",
                "--",
                "--patch",
                "x"
            ]),
            run(
                &[],
                &["--session-id", "--patch", "go", "--", "--patch", "x"]
            )
        );
        assert_eq!(
            p(&["headless", "--dump-config", "--patch", "f.yml"]),
            Ok(Mode::Dump {
                profile: "headless".into(),
                what: Dump::Config,
                patches: vec!["f.yml".into()]
            })
        );
        assert_eq!(
            p(&["headless", "go", "--patch"]),
            Err(usage("option '--patch <path>' argument missing"))
        );
        assert!(p(&["headless", "--profile", "web", "go"]).is_err());
    }

    #[test]
    fn from_default_profile_wraps_the_mode() {
        let none = |_: &str| false;
        let argv = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            parse_with(&argv(&["rescue", "--from-default-profile", "web"]), &none),
            Ok(Mode::Recreate {
                profile: "rescue".into(),
                template: "web".into(),
                then: Box::new(Mode::Profile {
                    profile: "rescue".into(),
                    patches: vec![],
                    args: vec![]
                })
            })
        );
        assert_eq!(
            parse_with(
                &argv(&[
                    "--from-default-profile=sdk",
                    "--profile",
                    "x",
                    "--dump-config"
                ]),
                &none
            ),
            Ok(Mode::Recreate {
                profile: "x".into(),
                template: "sdk".into(),
                then: Box::new(Mode::Dump {
                    profile: "x".into(),
                    what: Dump::Config,
                    patches: vec![]
                })
            })
        );
        assert!(parse_with(&argv(&["x", "--from-default-profile"]), &none).is_err());
    }

    #[test]
    fn any_profile_by_its_name() {
        assert_eq!(
            p(&["sdk", "--help"]),
            Ok(Mode::Profile {
                profile: "sdk".into(),
                patches: vec![],
                args: vec!["--help".into()]
            })
        );
        let custom = |n: &str| n == "rescue";
        assert_eq!(
            parse_with(&["rescue".to_string(), "go".to_string()], &custom),
            Ok(Mode::Profile {
                profile: "rescue".into(),
                patches: vec![],
                args: vec!["go".into()]
            })
        );
        assert_eq!(
            parse_with(&["nothere".to_string()], &custom),
            Err(usage("--profile <name> is required"))
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
                "--dump-config, --dump-default-config and --dump-config-schema are mutually exclusive"
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
