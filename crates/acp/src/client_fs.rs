//! Text-file I/O through the editor (`fs/read_text_file`, `fs/write_text_file`), for
//! clients that advertise it: the model then reads unsaved buffers and its writes land in
//! the editor, which keeps its own review of changes.

use std::path::Path;

use dsh_kernel::{BoxError, BoxFuture};
use dsh_tools::ClientFiles;
use serde_json::Value;

use crate::protocol::{self, ReadTextFile, WriteTextFile};
use crate::rpc::Peer;

pub struct EditorFiles {
    pub peer: Peer,
    pub session_id: String,
    pub reads: bool,
    pub writes: bool,
}

impl ClientFiles for EditorFiles {
    fn reads(&self) -> bool {
        self.reads
    }

    fn writes(&self) -> bool {
        self.writes
    }

    fn read_text(&self, path: &Path) -> BoxFuture<'static, Result<String, BoxError>> {
        let (peer, params) = (
            self.peer.clone(),
            protocol::to_value(&ReadTextFile {
                session_id: &self.session_id,
                path: path.display().to_string(),
            }),
        );
        Box::pin(async move {
            let answer = peer
                .request("fs/read_text_file", params)
                .await
                .map_err(|e| e.message)?;
            answer
                .get("content")
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or_else(|| "the editor answered without `content`".into())
        })
    }

    fn write_text(&self, path: &Path, content: String) -> BoxFuture<'static, Result<(), BoxError>> {
        let (peer, params) = (
            self.peer.clone(),
            protocol::to_value(&WriteTextFile {
                session_id: &self.session_id,
                path: path.display().to_string(),
                content,
            }),
        );
        Box::pin(async move {
            peer.request("fs/write_text_file", params)
                .await
                .map(|_| ())
                .map_err(|e| e.message.into())
        })
    }
}
