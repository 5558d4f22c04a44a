//! Handing the URL to the desktop's browser: only on a local launch (not under SSH), run
//! detached with a scrubbed environment (no credential reaches it), never waited for.

use std::process::{Command, Stdio};

/// Whether this launch is local: `SSH_CONNECTION` and `SSH_TTY` are absent or empty.
pub fn is_local_launch(var: impl Fn(&str) -> Option<String>) -> bool {
    ["SSH_CONNECTION", "SSH_TTY"]
        .iter()
        .all(|k| var(k).is_none_or(|v| v.is_empty()))
}

/// The command that opens `url`: an inherited `$BROWSER` (its first `:`-separated entry;
/// `%s` replaced by the URL, else the URL appended), else the platform opener.
pub fn opener(url: &str, browser: Option<&str>) -> (String, Vec<String>) {
    if let Some(entry) = browser.and_then(|b| b.split(':').map(str::trim).find(|e| !e.is_empty())) {
        let mut words = entry.split_whitespace().map(str::to_owned);
        let program = words.next().unwrap_or_default();
        let mut args: Vec<String> = words.collect();
        if args.iter().any(|a| a.contains("%s")) {
            for a in &mut args {
                *a = a.replace("%s", url);
            }
        } else {
            args.push(url.to_string());
        }
        return (program, args);
    }
    if cfg!(target_os = "macos") {
        ("open".into(), vec![url.into()])
    } else if cfg!(windows) {
        (
            "cmd".into(),
            vec!["/c".into(), "start".into(), String::new(), url.into()],
        )
    } else {
        ("xdg-open".into(), vec![url.into()])
    }
}

/// Starts the browser; the error says why it could not be started.
pub fn open(url: &str) -> Result<(), String> {
    let browser = std::env::var("BROWSER").ok();
    let (program, args) = opener(url, browser.as_deref());
    let mut child = Command::new(&program)
        .args(&args)
        .env_clear()
        .envs(dsh_host::secrets::scrubbed_process_env())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("{program}: {e}"))?;
    // Reap it in the background so it never lingers as a zombie.
    std::thread::spawn(move || {
        let _ = child.wait();
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ssh_launches_do_not_open_a_browser() {
        assert!(is_local_launch(|_| None));
        assert!(is_local_launch(|_| Some(String::new())));
        assert!(!is_local_launch(
            |k| (k == "SSH_TTY").then(|| "/dev/pts/1".into())
        ));
    }

    #[test]
    fn browser_variable_forms() {
        assert_eq!(
            opener("http://u", Some("firefox -P x:chromium")),
            (
                "firefox".into(),
                vec!["-P".into(), "x".into(), "http://u".into()]
            )
        );
        assert_eq!(
            opener("http://u", Some("open -a %s")),
            ("open".into(), vec!["-a".into(), "http://u".into()])
        );
        assert_eq!(
            opener("http://u", Some("")).1.last().map(String::as_str),
            Some("http://u")
        );
    }
}
