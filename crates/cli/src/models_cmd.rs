//! `dsh models`: the model routes a profile's tree serves and their models, read from the
//! same settings a session uses; `--probe` also asks each endpoint that has a model list
//! (`GET <baseURL>/models`) what it serves.

use std::path::Path;
use std::process::ExitCode;

use dsh_kernel::Context;
use dsh_llm::LlmRuntime;
use dsh_policies::DefaultModel;
use serde_json::{Value, json};

pub const HELP: &str = "\
Usage: dsh models [--profile <name>] [--probe] [--json]

List the model routes and models the profile's tree serves (default profile: headless),
as configured in settings.yaml (llm-deepseek, openai-compatible, llm-pi-ai sections) and
patches. The route and model new sessions use are marked with *.

Options:
  --profile <name>  the profile whose tree to read (default: headless)
  --probe           also ask each endpoint with a model list (GET <baseURL>/models)
                    which models it serves
  --json            one JSON object per route instead of the table
  -h, --help        show this help
";

struct Args {
    profile: String,
    probe: bool,
    json: bool,
}

fn parse(args: &[String]) -> Result<Option<Args>, String> {
    let mut out = Args {
        profile: "headless".into(),
        probe: false,
        json: false,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "-h" | "--help" => return Ok(None),
            "--probe" => out.probe = true,
            "--json" => out.json = true,
            "--profile" => {
                out.profile = it
                    .next()
                    .filter(|v| !v.is_empty())
                    .ok_or("option '--profile <name>' argument missing")?
                    .clone();
            }
            other => match other.strip_prefix("--profile=") {
                Some(v) if !v.is_empty() => out.profile = v.to_string(),
                _ => {
                    return Err(format!(
                        "unknown argument '{other}' (see dsh models --help)"
                    ));
                }
            },
        }
    }
    Ok(Some(out))
}

/// Runs `dsh models`.
pub fn run(home: &Path, args: &[String]) -> ExitCode {
    let args = match parse(args) {
        Ok(Some(a)) => a,
        Ok(None) => return crate::stdout::print(HELP),
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    // The headless tree needs a task to boot; nothing runs it.
    let mut ctx = serde_json::Map::new();
    ctx.insert("headlessStartup".into(), json!({"task": "dsh models"}));
    let (probe, as_json) = (args.probe, args.json);
    let composition = match crate::profile::compose_profile(home, &args.profile, &[], false) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(crate::CONFIG_ERROR);
        }
    };
    let run = dsh_app::Run {
        ctx,
        threads: dsh_app::Threads::One,
        main: Box::new(move |tree| Box::pin(list(tree, probe, as_json))),
    };
    crate::boot::run_tree(home, &composition, &crate::boot::catalog(), run)
}

async fn list(tree: &Context, probe: bool, as_json: bool) -> ExitCode {
    let Some(llm) = tree.get::<LlmRuntime>() else {
        eprintln!("dsh: the profile's tree has no llm row, so it serves no models");
        return ExitCode::from(1);
    };
    let default = tree.get::<DefaultModel>();
    let mut routes = Vec::new();
    for route in llm.routes() {
        let models: Vec<Value> = llm
            .models(&route)
            .into_iter()
            .map(|m| {
                let is_default = default
                    .as_ref()
                    .is_some_and(|d| d.provider == route && d.model == m.id);
                json!({
                    "id": m.id,
                    "contextWindow": m.context_window,
                    "maxTokens": m.default_max_tokens,
                    "input": m.input_modalities,
                    "reasoningEfforts": m.reasoning.map(|r| r.efforts),
                    "default": is_default,
                })
            })
            .collect();
        let mut entry = json!({"route": route, "models": models});
        if probe && let Some(asking) = llm.served_models(&route) {
            entry["served"] = match asking.await {
                Ok(ids) => json!(ids),
                Err(e) => json!({"error": e.to_string()}),
            };
        }
        routes.push(entry);
    }
    let mut text = String::new();
    if as_json {
        for r in &routes {
            text.push_str(&r.to_string());
            text.push('\n');
        }
    } else {
        text.push_str(&table(&routes));
        if let Some(d) = &default
            && !routes.iter().any(|r| r["route"] == d.provider.as_str())
        {
            text.push_str(&format!(
                "\nthe default route \"{}\" (model \"{}\") is served by no adapter: add its section to settings.yaml\n",
                d.provider, d.model
            ));
        }
    }
    crate::stdout::print(&text)
}

fn table(routes: &[Value]) -> String {
    let mut rows = vec![[
        "ROUTE".to_string(),
        "MODEL".into(),
        "CONTEXT".into(),
        "INPUT".into(),
    ]];
    let mut notes = Vec::new();
    for r in routes {
        let route = r["route"].as_str().unwrap_or_default();
        let models = r["models"].as_array().cloned().unwrap_or_default();
        if models.is_empty() {
            rows.push([
                route.into(),
                "(no model list)".into(),
                String::new(),
                String::new(),
            ]);
        }
        for m in models {
            let mark = if m["default"] == true { " *" } else { "" };
            let input: Vec<&str> = m["input"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            rows.push([
                route.into(),
                format!("{}{mark}", m["id"].as_str().unwrap_or_default()),
                m["contextWindow"]
                    .as_u64()
                    .map(|n| n.to_string())
                    .unwrap_or_default(),
                input.join(","),
            ]);
        }
        match r.get("served") {
            Some(Value::Array(ids)) => {
                let ids: Vec<&str> = ids.iter().filter_map(Value::as_str).collect();
                notes.push(format!("{route}: the endpoint serves {}", ids.join(", ")));
            }
            Some(other) => notes.push(format!(
                "{route}: asking the endpoint failed: {}",
                other["error"].as_str().unwrap_or_default()
            )),
            None => {}
        }
    }
    let widths: Vec<usize> = (0..4)
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for r in &rows {
        let line: Vec<String> = r
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    for n in notes {
        out.push_str(&n);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_marks_the_default_and_notes_probes() {
        let routes = vec![
            json!({"route": "local", "models": [
                {"id": "m", "contextWindow": 8192, "input": ["text"], "default": true}],
                "served": ["m", "n"]}),
            json!({"route": "gw", "models": [], "served": {"error": "TRANSPORT: refused"}}),
        ];
        assert_eq!(
            table(&routes),
            "ROUTE  MODEL            CONTEXT  INPUT\n\
             local  m *              8192     text\n\
             gw     (no model list)\n\
             local: the endpoint serves m, n\n\
             gw: asking the endpoint failed: TRANSPORT: refused\n"
        );
        assert!(parse(&["--bogus".into()]).is_err());
        assert!(parse(&["--help".into()]).unwrap().is_none());
    }
}
