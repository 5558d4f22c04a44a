//! A server-sent events parser for tests and benchmarks: feed it bytes as they arrive (any
//! split), get whole events (`event`, `id`, `data`) back. Comments and `retry:` lines are
//! consumed; an event without data is not dispatched (as browsers do).

/// One dispatched event.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SseEvent {
    /// `message` when the event named none.
    pub event: String,
    /// The `id:` of this event, if it had one.
    pub id: Option<String>,
    /// `data:` lines joined with `\n`.
    pub data: String,
}

impl SseEvent {
    /// `data` parsed as JSON (`Value::Null` when it is not JSON).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.data).unwrap_or(serde_json::Value::Null)
    }
}

/// Incremental parser.
#[derive(Debug, Default)]
pub struct SseParser {
    line: Vec<u8>,
    event: Option<String>,
    id: Option<String>,
    data: Vec<String>,
    /// The last `id:` seen on any event (what a browser sends as `Last-Event-ID`).
    pub last_event_id: Option<String>,
}

impl SseParser {
    pub fn new() -> Self {
        Self::default()
    }

    /// Consumes `bytes`; returns the events they completed.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<SseEvent> {
        let mut out = Vec::new();
        for &b in bytes {
            if b == b'\n' {
                let mut line = std::mem::take(&mut self.line);
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                if let Some(e) = self.line_done(&String::from_utf8_lossy(&line)) {
                    out.push(e);
                }
            } else {
                self.line.push(b);
            }
        }
        out
    }

    fn line_done(&mut self, line: &str) -> Option<SseEvent> {
        if line.is_empty() {
            let event = self.event.take();
            let id = self.id.take();
            if self.data.is_empty() {
                return None;
            }
            let data = std::mem::take(&mut self.data).join("\n");
            if id.is_some() {
                self.last_event_id = id.clone();
            }
            return Some(SseEvent {
                event: event.unwrap_or_else(|| "message".into()),
                id,
                data,
            });
        }
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "event" => self.event = Some(value.to_string()),
            "id" => self.id = Some(value.to_string()),
            "data" => self.data.push(value.to_string()),
            _ => {}
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn any_split_yields_the_same_events() {
        let text = b"retry: 1000\n\nevent: hello\ndata: {\"a\":1}\n\n: keepalive\n\nevent: events\nid: i:3\ndata: [1]\r\n\r\ndata: x\ndata: y\n\n";
        let whole = SseParser::new().push(text);
        assert_eq!(
            whole,
            vec![
                SseEvent {
                    event: "hello".into(),
                    id: None,
                    data: "{\"a\":1}".into()
                },
                SseEvent {
                    event: "events".into(),
                    id: Some("i:3".into()),
                    data: "[1]".into()
                },
                SseEvent {
                    event: "message".into(),
                    id: None,
                    data: "x\ny".into()
                },
            ]
        );
        for split in 0..text.len() {
            let mut p = SseParser::new();
            let mut got = p.push(&text[..split]);
            got.extend(p.push(&text[split..]));
            assert_eq!(got, whole, "split at {split}");
            assert_eq!(p.last_event_id.as_deref(), Some("i:3"));
        }
    }
}
