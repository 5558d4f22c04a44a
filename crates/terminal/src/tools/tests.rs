//! The terminal tools' schemas and argument reading.

use super::*;
use pretty_assertions::assert_eq;

#[test]
fn parameter_schemas_are_the_declared_ones() {
    use dsh_tools::params_schema;
    let text = |s: ObjectSchema| dsh_kernel::json::to_string(&s.to_value());
    let tuned = |tune: fn(&ToolTerminalConfig, &mut ObjectSchema),
                 mut s: ObjectSchema,
                 config: &ToolTerminalConfig| {
        tune(config, &mut s);
        s
    };
    assert_eq!(
        text(params_schema::<OpenArgs>().unwrap()),
        text(
            ObjectSchema::new()
                .required(
                    "type",
                    Prop::string("The kind of terminal; \"shell\" is an interactive bash."),
                )
                .optional(
                    "name",
                    Prop::string("An optional name, unique among your terminals."),
                )
                .optional(
                    "cwd",
                    Prop::string("The directory to start in (default: the workspace)."),
                )
        )
    );
    let send = || {
        ObjectSchema::new()
            .required("sessionId", Prop::string(SESSION_ID))
            .required("text", Prop::string("What to type."))
            .optional(
                "submit",
                Prop::boolean("Press Enter after the text (default true)."),
            )
    };
    let enabled = ToolTerminalConfig::default();
    assert_eq!(
        text(tuned(
            tune_send,
            params_schema::<SendArgs>().unwrap(),
            &enabled
        )),
        text(send().optional(
            "run_in_background",
            Prop::boolean("Return a job id at once instead of waiting; read it with job_output."),
        ))
    );
    let disabled = ToolTerminalConfig {
        enable_run_in_background: false,
        ..ToolTerminalConfig::default()
    };
    assert_eq!(
        text(tuned(
            tune_send,
            params_schema::<SendArgs>().unwrap(),
            &disabled
        )),
        text(send())
    );
    assert_eq!(
        text(params_schema::<ReadArgs>().unwrap()),
        text(
            ObjectSchema::new()
                .required("sessionId", Prop::string(SESSION_ID))
                .optional(
                    "offset",
                    Prop::number("Lines to skip back from the newest (default 0)."),
                )
                .optional(
                    "count",
                    Prop::number("How many lines to return (default 500)."),
                )
        )
    );
    assert_eq!(
        text(tuned(
            tune_signal,
            params_schema::<SignalArgs>().unwrap(),
            &enabled
        )),
        text(
            ObjectSchema::new()
                .required("sessionId", Prop::string(SESSION_ID))
                .required(
                    "signal",
                    Prop::enumeration("The signal to deliver.", &TerminalSignal::NAMES),
                )
        )
    );
    assert_eq!(
        text(params_schema::<CloseArgs>().unwrap()),
        text(ObjectSchema::new().required("sessionId", Prop::string(SESSION_ID)))
    );
    assert_eq!(
        text(params_schema::<ListArgs>().unwrap()),
        text(ObjectSchema::new())
    );
}

#[test]
fn an_undeclared_run_in_background_is_read_leniently() {
    let args: SendArgs = serde_json::from_value(
        json!({"sessionId": "pty-1", "text": "ls", "run_in_background": "yes"}),
    )
    .unwrap();
    assert_eq!(args.run_in_background, None);
    let args: SendArgs =
        serde_json::from_value(json!({"sessionId": "pty-1", "text": "ls"})).unwrap();
    assert_eq!(args.run_in_background, None);
    let args: SendArgs = serde_json::from_value(
        json!({"sessionId": "pty-1", "text": "ls", "run_in_background": true}),
    )
    .unwrap();
    assert_eq!(args.run_in_background, Some(true));
}

#[test]
fn renderings_match_the_recorded_bounded_forms() {
    let sent = SendResult {
        viewport: "printf 'PTY_OK\\n'\nPTY_OK\ndsh> ".into(),
        wait: WaitReason::StdinRead,
        status: SessionStatus::Running,
        truncated: false,
    };
    assert_eq!(
        render_send(&sent, 64),
        "K\ndsh> \n[wait: stdin_read]\n[session: running]\n[output truncated]"
    );
    assert_eq!(
        render_open("pty-1", Some("main"), "shell", "dsh> ", 64),
        "started terminal session pty-1 (main) [type: shell]\ndsh> "
    );
    let page = ReadPage {
        text: "dsh> printf 'PTY_OK\\n'\nPTY_OK\ndsh> ".into(),
        total_lines: 3,
        line_begin: 0,
        line_end: 3,
        truncated: false,
    };
    assert_eq!(
        render_read(&page, 64),
        "dsh> printf 'PTY_OK\\n'\nPTY_OK\ndsh> \n[lines: 0-3 of 3]"
    );
    assert_eq!(render_list(&[], 64), "(no terminal sessions)");
    assert_eq!(
        render_send(
            &SendResult {
                viewport: String::new(),
                wait: WaitReason::SessionExit,
                status: SessionStatus::Exited {
                    code: Some(3),
                    signal: None
                },
                truncated: false
            },
            1000
        ),
        "(no new output)\n[wait: session_exit]\n[session: exited code=3 signal=null]"
    );
    assert_eq!(
        bound_text(&"x".repeat(100), 30),
        format!("{}{TRUNCATED}", "x".repeat(11))
    );
}
