//! Realistic session logs for the persistence tests and the open benchmark: turns with
//! reasoning/text/tool-call delta runs, assistant messages citing their chunks, tool
//! calls and results, titles — and optionally an open last turn with unanswered calls.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use dsh_llm::{ContentBlock, Message, StreamChunk};
use dsh_session::{Event, Session, SessionHeader, SurfaceIntent, types};
use serde_json::{Value, json};

const WORDS: [&str; 16] = [
    " the",
    " file",
    " session",
    " and",
    " résumé",
    " — ",
    " tool",
    " call",
    " returns",
    " a",
    " list",
    " of",
    " lines",
    "\n",
    " ok",
    " “quoted”",
];

pub use dsh_test_support::rng::Rng;

/// Builds a log through the real append validation.
pub struct Builder {
    pub session: Session,
    time: i64,
    rng: Rng,
    turn: u64,
    calls: u64,
}

impl Builder {
    pub fn new(header: SessionHeader, seed: u64) -> Self {
        Self {
            session: Session::new(header),
            time: 1_700_000_000_000,
            rng: Rng::new(seed),
            turn: 0,
            calls: 0,
        }
    }

    fn append(
        &mut self,
        event_type: &str,
        data: Value,
        surface: Option<SurfaceIntent>,
    ) -> Arc<Event> {
        self.time += self.rng.below(40) as i64;
        self.session
            .append_at(event_type, data, surface, self.time)
            .unwrap_or_else(|e| panic!("{event_type}: {e}"))
    }

    fn chunk(&mut self, step: u64, chunk: StreamChunk) -> u64 {
        let turn = self.turn;
        self.append(
            types::ASSISTANT_CHUNK,
            json!({"turn": turn, "step": step, "chunk": chunk}),
            None,
        )
        .seq
    }

    fn words(&mut self, n: usize) -> Vec<String> {
        (0..n)
            .map(|_| WORDS[self.rng.below(WORDS.len() as u64) as usize].to_string())
            .collect()
    }

    /// One streamed block: start, `n` deltas, end. Returns the chunk seqs and the text.
    fn stream_block(&mut self, step: u64, index: u32, kind: &str, n: usize) -> (Vec<u64>, String) {
        let mut seqs = vec![self.chunk(
            step,
            StreamChunk::BlockStart {
                index,
                block_type: kind.into(),
            },
        )];
        let parts = self.words(n);
        for text in &parts {
            let chunk = match kind {
                "reasoning" => StreamChunk::ReasoningDelta {
                    index,
                    text: text.clone(),
                },
                _ => StreamChunk::TextDelta {
                    index,
                    text: text.clone(),
                },
            };
            seqs.push(self.chunk(step, chunk));
        }
        let text: String = parts.concat();
        let block = match kind {
            "reasoning" => ContentBlock::Reasoning { text: text.clone() },
            _ => ContentBlock::text(text.clone()),
        };
        seqs.push(self.chunk(step, StreamChunk::BlockEnd { index, block }));
        (seqs, text)
    }

    fn stream_tool_call(&mut self, step: u64, index: u32, n: usize) -> (Vec<u64>, ContentBlock) {
        self.calls += 1;
        let id = format!("call_{}_{}", self.turn, self.calls);
        let mut seqs = vec![self.chunk(
            step,
            StreamChunk::BlockStart {
                index,
                block_type: "tool-call".into(),
            },
        )];
        let mut args = String::new();
        for (k, part) in std::iter::once("{\"path\":\"".to_string())
            .chain((0..n.saturating_sub(2)).map(|i| format!("src/{i}")))
            .chain(std::iter::once("\"}".to_string()))
            .enumerate()
        {
            args.push_str(&part);
            let name = (k == 0).then(|| "read_file".to_string());
            seqs.push(self.chunk(
                step,
                StreamChunk::ToolCallDelta {
                    index,
                    id: id.clone(),
                    name,
                    arguments_delta: part,
                },
            ));
        }
        let block = ContentBlock::ToolCall {
            id,
            name: "read_file".into(),
            arguments: args,
        };
        seqs.push(self.chunk(
            step,
            StreamChunk::BlockEnd {
                index,
                block: block.clone(),
            },
        ));
        (seqs, block)
    }

    fn assistant(
        &mut self,
        step: u64,
        content: Vec<ContentBlock>,
        sources: Vec<u64>,
    ) -> Arc<Event> {
        let turn = self.turn;
        let message = Message::assistant(content, "deepseek", "deepseek-chat", None);
        let data = json!({"turn": turn, "step": step, "message": message.to_value(),
            "usage": {"inputTokens": 1200, "outputTokens": 80}});
        self.append(
            types::ASSISTANT_MESSAGE,
            data,
            Some(SurfaceIntent::append_citing(sources)),
        )
    }

    /// Starts a turn with its user message; `deltas` sizes the streamed blocks.
    fn open_turn(&mut self, deltas: usize) -> (Vec<u64>, Vec<ContentBlock>) {
        self.turn += 1;
        let turn = self.turn;
        self.append(types::TURN_START, json!({"turn": turn}), None);
        self.append(types::STEP_START, json!({"turn": turn, "step": 1}), None);
        let user = Message::user_text(format!("please look at part {turn} of the project"));
        self.append(
            types::USER_MESSAGE,
            user.to_value(),
            Some(SurfaceIntent::append()),
        );
        if turn == 1 {
            let header = json!({"header": {"config": {"provider": "deepseek", "model": "deepseek-chat"},
                "system": "You are a coding agent."}, "reason": "initial"});
            self.append(types::REQUEST_HEADER, header, None);
            self.append(
                types::REQUEST_CONTEXT,
                json!({"provider": "deepseek", "model": "deepseek-chat"}),
                None,
            );
        }
        let (mut seqs, reasoning) = self.stream_block(1, 0, "reasoning", deltas);
        let (more, text) = self.stream_block(1, 1, "text", deltas / 2 + 1);
        seqs.extend(more);
        (
            seqs,
            vec![
                ContentBlock::Reasoning { text: reasoning },
                ContentBlock::text(text),
            ],
        )
    }

    /// A complete turn: two steps, one tool round trip, a final answer.
    pub fn full_turn(&mut self, deltas: usize) {
        let (mut seqs, mut content) = self.open_turn(deltas);
        let (more, call) = self.stream_tool_call(1, 2, deltas / 4 + 3);
        seqs.extend(more);
        content.push(call.clone());
        self.assistant(1, content, seqs);
        let turn = self.turn;
        let ContentBlock::ToolCall {
            id,
            name,
            arguments,
        } = call
        else {
            unreachable!()
        };
        let call_seq = self
            .append(types::TOOL_CALL, json!({"turn": turn, "step": 1, "callId": id, "name": name, "arguments": arguments}), None)
            .seq;
        let output = self.words(60).concat();
        let result = Message::tool_result(&id, vec![ContentBlock::text(output)], false);
        self.append(
            types::TOOL_RESULT,
            json!({"turn": turn, "step": 1, "message": result.to_value()}),
            Some(SurfaceIntent::append_citing(vec![call_seq])),
        );
        self.append(types::STEP_END, json!({"turn": turn, "step": 1}), None);
        self.append(types::STEP_START, json!({"turn": turn, "step": 2}), None);
        let (seqs, text) = self.stream_block(2, 0, "text", deltas);
        self.assistant(2, vec![ContentBlock::text(text)], seqs);
        self.append(types::STEP_END, json!({"turn": turn, "step": 2}), None);
        self.append(
            types::TURN_END,
            json!({"turn": turn, "reason": {"kind": "completed"}}),
            None,
        );
        if turn % 5 == 1 {
            let title = json!({"title": format!("Session about part {turn}"), "messageSeqs": [],
                "source": {"kind": "fallback"}});
            self.append(types::SESSION_TITLE, title, None);
        }
    }

    /// An open turn: the model asked for two calls; the first was recorded as started, no
    /// result is stored for either.
    pub fn interrupted_turn(&mut self, deltas: usize) {
        let (mut seqs, mut content) = self.open_turn(deltas);
        let (more, first) = self.stream_tool_call(1, 2, 4);
        seqs.extend(more);
        let (more, second) = self.stream_tool_call(1, 3, 4);
        seqs.extend(more);
        content.push(first.clone());
        content.push(second);
        self.assistant(1, content, seqs);
        let turn = self.turn;
        let ContentBlock::ToolCall {
            id,
            name,
            arguments,
        } = first
        else {
            unreachable!()
        };
        self.append(
            types::TOOL_CALL,
            json!({"turn": turn, "step": 1, "callId": id, "name": name, "arguments": arguments}),
            None,
        );
    }

    pub fn events(&self) -> Vec<Arc<Event>> {
        self.session.events().to_vec()
    }
}

/// A session of `turns` complete turns, then (if `open_tail`) an interrupted one.
pub fn session_events(
    header: &SessionHeader,
    turns: usize,
    deltas: usize,
    open_tail: bool,
) -> Vec<Arc<Event>> {
    let mut b = Builder::new(header.clone(), 7);
    for _ in 0..turns {
        b.full_turn(deltas);
    }
    if open_tail {
        b.interrupted_turn(deltas);
    }
    b.events()
}

/// A session of about `target` events with delta runs of about `deltas`.
pub fn session_of_size(header: &SessionHeader, target: usize, deltas: usize) -> Vec<Arc<Event>> {
    let mut b = Builder::new(header.clone(), 11);
    while b.session.events().len() < target {
        b.full_turn(deltas);
    }
    b.events()
}

pub fn header(id: &str, cwd: Option<&str>) -> SessionHeader {
    let mut h = SessionHeader::new(id, 1_700_000_000_000);
    h.cwd = cwd.map(str::to_owned);
    h
}

/// Splits `events` into batches of pseudo-random sizes (1..=max).
pub fn batches(events: &[Arc<Event>], max: usize, seed: u64) -> Vec<Vec<Arc<Event>>> {
    let mut rng = Rng::new(seed);
    let mut out = Vec::new();
    let mut i = 0;
    while i < events.len() {
        let n = (1 + rng.below(max as u64) as usize).min(events.len() - i);
        out.push(events[i..i + n].to_vec());
        i += n;
    }
    out
}
