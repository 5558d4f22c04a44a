//! Wire text of history messages, kept per message between requests.
//!
//! Every request of a session sends the whole history again, and the history is a list of
//! shared, immutable messages (`Arc<Message>`). How one message is written depends only on
//! the message and on a few facts that stay put between requests (the wire, and what the
//! serializer calls its context: the route that decides whether reasoning is replayed, or
//! whether reasoning is passed back at all). So the text is kept here, keyed by the
//! message's allocation, and a step writes only the messages it has not sent before.
//!
//! The key is sound because an entry holds a `Weak` to its message: while the entry lives,
//! the allocation is not freed, so no other message can take its address; and a message
//! cannot change in place, since `Arc::get_mut` refuses while a `Weak` exists and
//! `Arc::make_mut` then moves the value to a new allocation. Entries of dropped messages
//! are swept whenever the table has doubled since the last sweep.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use dsh_llm::Message;

/// A table of kept texts of one wire (one static per wire).
pub(crate) struct Kept<W> {
    table: Mutex<Option<Table<W>>>,
}

struct Table<W> {
    entries: HashMap<usize, Entry<W>>,
    /// The table's size after the last sweep.
    swept: usize,
}

struct Entry<W> {
    message: Weak<Message>,
    context: Box<str>,
    wire: Arc<W>,
}

/// Sweeps wait for at least this many entries.
const SWEEP_FLOOR: usize = 256;

impl<W> Kept<W> {
    pub(crate) const fn new() -> Self {
        Self {
            table: Mutex::new(None),
        }
    }

    /// The wire form of each message, in order: kept ones as they are, the others made by
    /// `make` (outside the table's lock) and kept when `keep` says so. Messages holding
    /// large request-only data (inlined images) are better not kept.
    pub(crate) fn wires<E>(
        &self,
        messages: &[Arc<Message>],
        context: &str,
        keep: impl Fn(&Message) -> bool,
        mut make: impl FnMut(&Message) -> Result<W, E>,
    ) -> Result<Vec<Arc<W>>, E> {
        let found: Vec<Option<Arc<W>>> = {
            let table = self.table.lock().unwrap_or_else(|p| p.into_inner());
            messages
                .iter()
                .map(|m| {
                    let entry = table.as_ref()?.entries.get(&key(m))?;
                    // Same address while the entry's `Weak` lives: the same message.
                    (std::ptr::eq(entry.message.as_ptr(), Arc::as_ptr(m))
                        && *entry.context == *context)
                        .then(|| entry.wire.clone())
                })
                .collect()
        };
        let mut made = Vec::new();
        let mut out = Vec::with_capacity(messages.len());
        for (message, hit) in messages.iter().zip(found) {
            let wire = match hit {
                Some(wire) => wire,
                None => {
                    let wire = Arc::new(make(message)?);
                    if keep(message) {
                        made.push((message, wire.clone()));
                    }
                    wire
                }
            };
            out.push(wire);
        }
        if !made.is_empty() {
            let mut table = self.table.lock().unwrap_or_else(|p| p.into_inner());
            let table = table.get_or_insert_with(|| Table {
                entries: HashMap::new(),
                swept: 0,
            });
            for (message, wire) in made {
                table.entries.insert(
                    key(message),
                    Entry {
                        message: Arc::downgrade(message),
                        context: context.into(),
                        wire,
                    },
                );
            }
            if table.entries.len() >= SWEEP_FLOOR.max(table.swept * 2) {
                table.entries.retain(|_, e| e.message.strong_count() > 0);
                table.swept = table.entries.len();
            }
        }
        Ok(out)
    }

    /// How many entries the table holds (tests).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        let table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        table.as_ref().map_or(0, |t| t.entries.len())
    }
}

fn key(message: &Arc<Message>) -> usize {
    Arc::as_ptr(message) as usize
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn texts(
        kept: &Kept<String>,
        messages: &[Arc<Message>],
        context: &str,
        made: &mut usize,
    ) -> Vec<String> {
        kept.wires::<()>(
            messages,
            context,
            |_| true,
            |m| {
                *made += 1;
                Ok(format!("{context}:{}", m.content.len()))
            },
        )
        .unwrap()
        .iter()
        .map(|w| w.to_string())
        .collect()
    }

    /// A message is made once per context; a dropped message's entry is swept once the
    /// table has grown, and a new message at a reused address is never served an old text.
    #[test]
    fn a_message_is_written_once_per_context_and_dropped_ones_are_swept() {
        let kept = Kept::new();
        let a = Arc::new(Message::user_text("a"));
        let b = Arc::new(Message::user_text("b"));
        let mut made = 0;
        assert_eq!(
            texts(&kept, std::slice::from_ref(&a), "r1", &mut made),
            ["r1:1"]
        );
        assert_eq!(
            texts(&kept, &[a.clone(), b.clone()], "r1", &mut made),
            ["r1:1", "r1:1"]
        );
        assert_eq!(made, 2, "the first message was kept");
        assert_eq!(
            texts(&kept, std::slice::from_ref(&a), "r2", &mut made),
            ["r2:1"]
        );
        assert_eq!(made, 3, "another context writes it again");
        // The same message with the same content, but a different allocation, is made anew.
        let a2 = Arc::new((*a).clone());
        texts(&kept, &[a2], "r2", &mut made);
        assert_eq!(made, 4);
        drop(a);
        drop(b);
        for _ in 0..SWEEP_FLOOR {
            let m = Arc::new(Message::user_text("x"));
            texts(&kept, &[m], "r1", &mut made);
        }
        assert!(
            kept.len() < SWEEP_FLOOR,
            "dropped messages were swept: {}",
            kept.len()
        );
    }

    #[test]
    fn what_keep_refuses_is_made_every_time() {
        let kept = Kept::new();
        let a = Arc::new(Message::user_text("a"));
        let mut made = 0;
        for _ in 0..3 {
            kept.wires::<()>(
                std::slice::from_ref(&a),
                "r",
                |_| false,
                |_| {
                    made += 1;
                    Ok(String::new())
                },
            )
            .unwrap();
        }
        assert_eq!((made, kept.len()), (3, 0));
    }
}
