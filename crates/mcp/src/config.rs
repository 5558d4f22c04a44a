//! The `mcp-client` row's config: upstream's fields, defaults and validation messages.
//!
//! One row connects one server. `transport` picks the shape: `stdio` (`command`, `args`,
//! `env`, `cwd`) or `streamable-http` (`url`, `headers`). Both carry `serverName` (the tool
//! namespace, `[A-Za-z0-9_-]{1,32}`), `toolCallTimeoutMs` (60000), `failOnStartupError`
//! (false) and `reconnect` (`enabled` true, `initialDelayMs` 500, `maxDelayMs` 30000,
//! `maxAttempts` 10).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

/// The largest delay a JavaScript timer accepts; upstream bounds every delay by it.
pub const MAX_TIMER_DELAY_MS: f64 = 2_147_483_647.0;
/// Upstream's per-call default.
pub const DEFAULT_TOOL_CALL_TIMEOUT_MS: f64 = 60_000.0;

/// A row's config was refused. The message names the server and the field, as upstream's.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// How to reach the server.
#[derive(Clone, Debug, PartialEq)]
pub enum Transport {
    /// A child process speaking newline-delimited JSON-RPC on stdin/stdout.
    Stdio {
        command: String,
        args: Vec<String>,
        /// Merged over the scrubbed process environment.
        env: Vec<(String, String)>,
        /// Empty: the working directory of dsh.
        cwd: String,
    },
    /// MCP Streamable HTTP.
    StreamableHttp {
        url: String,
        headers: Vec<(String, String)>,
    },
}

/// The reconnect policy, resolved and checked.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ReconnectPolicy {
    pub enabled: bool,
    pub initial_delay: Duration,
    pub max_delay: Duration,
    pub max_attempts: u64,
}

impl Default for ReconnectPolicy {
    fn default() -> Self {
        Self {
            enabled: true,
            initial_delay: Duration::from_millis(500),
            max_delay: Duration::from_millis(30_000),
            max_attempts: 10,
        }
    }
}

impl ReconnectPolicy {
    /// The delay before attempt `attempt` (1-based) of an outage: doubling from the initial
    /// delay, capped at the maximum.
    pub fn delay(&self, attempt: u64) -> Duration {
        let factor =
            2u32.saturating_pow(u32::try_from(attempt.saturating_sub(1)).unwrap_or(u32::MAX));
        self.initial_delay
            .checked_mul(factor)
            .map_or(self.max_delay, |d| d.min(self.max_delay))
    }
}

/// What the startup attempt's failure means for the owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartupFailure {
    /// Logged; the server keeps retrying in the background (upstream's default).
    Contain,
    /// The row fails to load.
    Fail,
}

/// One server, resolved.
#[derive(Clone, Debug, PartialEq)]
pub struct ServerConfig {
    pub server_name: String,
    pub transport: Transport,
    pub tool_call_timeout: Duration,
    pub startup_failure: StartupFailure,
    pub reconnect: ReconnectPolicy,
}

impl ServerConfig {
    /// `mcp-client(<serverName>)`: the prefix of every message about this server.
    pub fn label(&self) -> String {
        format!("mcp-client({})", self.server_name)
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawConfig {
    transport: Option<String>,
    server_name: Option<String>,
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    cwd: String,
    url: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    tool_call_timeout_ms: Option<f64>,
    #[serde(default)]
    fail_on_startup_error: bool,
    reconnect: Option<serde_json::Map<String, Value>>,
}

/// Whether `name` is a valid `serverName`.
pub fn valid_server_name(name: &str) -> bool {
    (1..=32).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Parses and checks one row's config (`null` counts as `{}`).
pub fn parse_config(value: &Value) -> Result<ServerConfig, ConfigError> {
    let value = match value {
        Value::Null => Value::Object(Default::default()),
        v => v.clone(),
    };
    let raw: RawConfig = serde_path_to_error_free(value)?;
    let server_name = raw
        .server_name
        .ok_or_else(|| ConfigError("mcp-client: `serverName` is required".into()))?;
    if !valid_server_name(&server_name) {
        return Err(ConfigError(format!(
            "mcp-client: serverName \"{server_name}\" must match [A-Za-z0-9_-]{{1,32}}"
        )));
    }
    let label = format!("mcp-client({server_name})");
    let transport = match raw.transport.as_deref() {
        Some("stdio") => {
            let command = raw.command.filter(|c| !c.is_empty()).ok_or_else(|| {
                ConfigError(format!(
                    "{label}: `command` is required for the stdio transport"
                ))
            })?;
            if raw.url.is_some() || !raw.headers.is_empty() {
                return Err(ConfigError(format!(
                    "{label}: `url` and `headers` belong to the streamable-http transport"
                )));
            }
            Transport::Stdio {
                command,
                args: raw.args,
                env: raw.env.into_iter().collect(),
                cwd: raw.cwd,
            }
        }
        Some("streamable-http") => {
            let url = raw.url.filter(|u| !u.is_empty()).ok_or_else(|| {
                ConfigError(format!(
                    "{label}: `url` is required for the streamable-http transport"
                ))
            })?;
            if raw.command.is_some()
                || !raw.args.is_empty()
                || !raw.env.is_empty()
                || !raw.cwd.is_empty()
            {
                return Err(ConfigError(format!(
                    "{label}: `command`, `args`, `env` and `cwd` belong to the stdio transport"
                )));
            }
            let parsed = reqwest::Url::parse(&url)
                .map_err(|e| ConfigError(format!("{label}: url \"{url}\" is not a URL: {e}")))?;
            if !matches!(parsed.scheme(), "http" | "https") {
                return Err(ConfigError(format!(
                    "{label}: url \"{url}\" must be an http or https URL"
                )));
            }
            Transport::StreamableHttp {
                url,
                headers: raw.headers.into_iter().collect(),
            }
        }
        Some(other) => {
            return Err(ConfigError(format!(
                "{label}: transport \"{other}\" is not \"stdio\" or \"streamable-http\""
            )));
        }
        None => {
            return Err(ConfigError(format!(
                "{label}: `transport` is required (\"stdio\" or \"streamable-http\")"
            )));
        }
    };
    let timeout_ms = raw
        .tool_call_timeout_ms
        .unwrap_or(DEFAULT_TOOL_CALL_TIMEOUT_MS);
    if !timeout_ms.is_finite() || timeout_ms <= 0.0 || timeout_ms > MAX_TIMER_DELAY_MS {
        return Err(ConfigError(format!(
            "{label}: toolCallTimeoutMs must be a number of milliseconds above 0 and at most {MAX_TIMER_DELAY_MS}"
        )));
    }
    Ok(ServerConfig {
        reconnect: resolve_reconnect(raw.reconnect.as_ref(), &format!("{label}: reconnect"))?,
        server_name,
        transport,
        tool_call_timeout: Duration::from_secs_f64(timeout_ms / 1000.0),
        startup_failure: if raw.fail_on_startup_error {
            StartupFailure::Fail
        } else {
            StartupFailure::Contain
        },
    })
}

/// Deserializes without a path library: the config is small and flat, and serde's own
/// message names the offending field.
fn serde_path_to_error_free(value: Value) -> Result<RawConfig, ConfigError> {
    serde_json::from_value(value).map_err(|e| ConfigError(format!("mcp-client: {e}")))
}

/// Upstream's `resolveReconnectPolicy`: unknown keys, bounds and the ordering of the two
/// delays are checked; omitted keys take the defaults.
fn resolve_reconnect(
    raw: Option<&serde_json::Map<String, Value>>,
    path: &str,
) -> Result<ReconnectPolicy, ConfigError> {
    let defaults = ReconnectPolicy::default();
    let Some(raw) = raw else {
        return Ok(defaults);
    };
    for key in raw.keys() {
        if !matches!(
            key.as_str(),
            "enabled" | "initialDelayMs" | "maxDelayMs" | "maxAttempts"
        ) {
            return Err(ConfigError(format!(
                "{path}.{key} is not a reconnect option"
            )));
        }
    }
    let enabled = match raw.get("enabled") {
        None => defaults.enabled,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(ConfigError(format!("{path}.enabled must be a boolean"))),
    };
    let delay = |key: &str, default: Duration| -> Result<f64, ConfigError> {
        match raw.get(key) {
            None => Ok(default.as_secs_f64() * 1000.0),
            Some(v) => v
                .as_f64()
                .filter(|ms| ms.is_finite() && *ms > 0.0 && *ms <= MAX_TIMER_DELAY_MS)
                .ok_or_else(|| {
                    ConfigError(format!(
                        "{path}.{key} must be a number of milliseconds above 0 and at most {MAX_TIMER_DELAY_MS}"
                    ))
                }),
        }
    };
    let initial = delay("initialDelayMs", defaults.initial_delay)?;
    let max = delay("maxDelayMs", defaults.max_delay)?;
    if initial > max {
        return Err(ConfigError(format!(
            "{path}.initialDelayMs must be less than or equal to maxDelayMs"
        )));
    }
    let max_attempts = match raw.get("maxAttempts") {
        None => defaults.max_attempts,
        Some(v) => v
            .as_u64()
            .or_else(|| {
                v.as_f64()
                    .filter(|f| f.fract() == 0.0 && *f >= 1.0 && *f <= 9_007_199_254_740_991.0)
                    .map(|f| f as u64)
            })
            .filter(|n| *n >= 1)
            .ok_or_else(|| ConfigError(format!("{path}.maxAttempts must be a positive integer")))?,
    };
    Ok(ReconnectPolicy {
        enabled,
        initial_delay: Duration::from_secs_f64(initial / 1000.0),
        max_delay: Duration::from_secs_f64(max / 1000.0),
        max_attempts,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    #[test]
    fn defaults_are_upstreams() {
        let c = parse_config(&json!({"transport": "stdio", "serverName": "fs", "command": "srv"}))
            .unwrap();
        assert_eq!(
            c,
            ServerConfig {
                server_name: "fs".into(),
                transport: Transport::Stdio {
                    command: "srv".into(),
                    args: vec![],
                    env: vec![],
                    cwd: String::new()
                },
                tool_call_timeout: Duration::from_secs(60),
                startup_failure: StartupFailure::Contain,
                reconnect: ReconnectPolicy {
                    enabled: true,
                    initial_delay: Duration::from_millis(500),
                    max_delay: Duration::from_secs(30),
                    max_attempts: 10
                },
            }
        );
        let h = parse_config(&json!({
            "transport": "streamable-http", "serverName": "web", "url": "http://127.0.0.1:1/mcp",
            "headers": {"Authorization": "Bearer x"}, "toolCallTimeoutMs": 250,
            "failOnStartupError": true, "reconnect": {"maxAttempts": 2, "initialDelayMs": 10}
        }))
        .unwrap();
        assert_eq!(
            h.transport,
            Transport::StreamableHttp {
                url: "http://127.0.0.1:1/mcp".into(),
                headers: vec![("Authorization".into(), "Bearer x".into())]
            }
        );
        assert_eq!(h.tool_call_timeout, Duration::from_millis(250));
        assert_eq!(h.startup_failure, StartupFailure::Fail);
        assert_eq!(h.reconnect.max_attempts, 2);
        assert_eq!(h.reconnect.initial_delay, Duration::from_millis(10));
    }

    #[test]
    fn bad_rows_are_refused_with_the_field_named() {
        let err = |v: Value| parse_config(&v).unwrap_err().0;
        assert_eq!(err(json!({})), "mcp-client: `serverName` is required");
        assert_eq!(
            err(json!({"transport": "stdio", "serverName": "a b", "command": "x"})),
            "mcp-client: serverName \"a b\" must match [A-Za-z0-9_-]{1,32}"
        );
        assert_eq!(
            err(json!({"serverName": "s", "command": "x"})),
            "mcp-client(s): `transport` is required (\"stdio\" or \"streamable-http\")"
        );
        assert_eq!(
            err(json!({"transport": "sse", "serverName": "s"})),
            "mcp-client(s): transport \"sse\" is not \"stdio\" or \"streamable-http\""
        );
        assert_eq!(
            err(json!({"transport": "stdio", "serverName": "s"})),
            "mcp-client(s): `command` is required for the stdio transport"
        );
        assert_eq!(
            err(json!({"transport": "streamable-http", "serverName": "s", "url": "ftp://x"})),
            "mcp-client(s): url \"ftp://x\" must be an http or https URL"
        );
        assert_eq!(
            err(
                json!({"transport": "stdio", "serverName": "s", "command": "x", "reconnect": {"tries": 1}})
            ),
            "mcp-client(s): reconnect.tries is not a reconnect option"
        );
        assert_eq!(
            err(
                json!({"transport": "stdio", "serverName": "s", "command": "x", "reconnect": {"initialDelayMs": 5000, "maxDelayMs": 10}})
            ),
            "mcp-client(s): reconnect.initialDelayMs must be less than or equal to maxDelayMs"
        );
        assert_eq!(
            err(
                json!({"transport": "stdio", "serverName": "s", "command": "x", "reconnect": {"maxAttempts": 1.5}})
            ),
            "mcp-client(s): reconnect.maxAttempts must be a positive integer"
        );
        assert_eq!(
            err(
                json!({"transport": "stdio", "serverName": "s", "command": "x", "toolCallTimeoutMs": -1})
            ),
            "mcp-client(s): toolCallTimeoutMs must be a number of milliseconds above 0 and at most 2147483647"
        );
        assert!(
            err(json!({"transport": "stdio", "serverName": "s", "command": "x", "bogus": 1}))
                .contains("bogus")
        );
    }

    #[test]
    fn backoff_doubles_up_to_the_ceiling() {
        let p = ReconnectPolicy::default();
        let ms: Vec<u128> = (1..=8).map(|a| p.delay(a).as_millis()).collect();
        assert_eq!(ms, vec![500, 1000, 2000, 4000, 8000, 16000, 30000, 30000]);
        assert_eq!(p.delay(200), Duration::from_secs(30));
    }
}
