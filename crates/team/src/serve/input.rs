//! The input a client queues through the gateway (`POST /v1/sessions`, `POST
//! /v1/sessions/{id}/messages`): its text, the ids and model it chose, the directory to move
//! to, whether it answers approvals, and its images, each checked before anything is queued.

use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use serde_json::{Value, json};

use super::{Body, MAX_BODY_BYTES, MAX_INPUT_BYTES, body_json_within, error};

/// Input a client queues: its text, and the ids and model it chose (optional).
pub(super) struct Input {
    text: String,
    /// The id a new session takes (`POST /v1/sessions` only).
    pub(super) session_id: Option<String>,
    /// The id the turn's user message takes, so the client can find it in the log.
    message_id: Option<String>,
    /// The model the turn runs on, when the client chose one.
    route: Option<crate::route::Route>,
    /// The directory the session moves to first (against its current one; inside the
    /// worker's workspace).
    cwd: Option<String>,
    /// The client answers the turn's approvals (`POST .../approvals/{id}`).
    answers_approvals: bool,
    /// Images sent after the text, each `{mediaType, data, name?}` (checked).
    images: Vec<Value>,
}

impl Input {
    /// The inbox body a worker reads.
    pub(super) fn body(&self) -> Value {
        let mut body = json!({"text": self.text});
        if let Some(id) = &self.message_id {
            body["messageId"] = json!(id);
        }
        if let Some(route) = &self.route {
            body["route"] = json!(route);
        }
        if let Some(cwd) = &self.cwd {
            body["cwd"] = json!(cwd);
        }
        if self.answers_approvals {
            body["answersApprovals"] = json!(true);
        }
        if !self.images.is_empty() {
            body["images"] = json!(self.images);
        }
        body
    }
}

/// The images of an input, each checked as the turn will store it (type, canonical base64,
/// the store's limits on bytes, pixels and sides, a container that decodes): a bad image is
/// refused here, never queued for a turn that could not record it.
fn checked_images(images: &Value) -> Result<Vec<Value>, String> {
    let Value::Array(images) = images else {
        return Err("\"images\" must be an array of {mediaType, data, name?}".into());
    };
    let limits = dsh_attachments::ImageLimits::default();
    if images.len() as u64 > limits.max_images_per_message {
        return Err(format!(
            "at most {} images go with one input",
            limits.max_images_per_message
        ));
    }
    let store = dsh_attachments::AttachmentStore::new(std::path::PathBuf::new(), limits);
    let mut total = 0u64;
    let mut out = Vec::new();
    for (i, image) in images.iter().enumerate() {
        let field = |key: &str| image.get(key).and_then(Value::as_str);
        let (Some(media_type), Some(data)) = (field("mediaType"), field("data")) else {
            return Err(format!(
                "image {i} needs \"mediaType\" and \"data\" strings"
            ));
        };
        let name = field("name");
        let decoded = dsh_attachments::decode_prompt_image(media_type, data, name)
            .map_err(|e| format!("image {i}: {}", e.message()))?;
        store
            .validate_image(&decoded)
            .map_err(|e| format!("image {i}: {}", e.message))?;
        total += decoded.data.len() as u64;
        if total > store.limits().max_message_image_bytes {
            return Err(format!(
                "the images of one input may hold {} bytes at most",
                store.limits().max_message_image_bytes
            ));
        }
        let mut kept = json!({"mediaType": media_type, "data": data});
        if let Some(name) = name {
            kept["name"] = json!(name);
        }
        out.push(kept);
    }
    Ok(out)
}

/// The input of a JSON request body, or the response refusing it.
pub(super) async fn input(req: Request<Incoming>) -> Result<Input, Response<Body>> {
    let value = body_json_within(req, MAX_INPUT_BYTES).await?;
    let text = match value.get("text") {
        Some(Value::String(t)) if t.len() > MAX_BODY_BYTES => {
            return Err(error(
                StatusCode::PAYLOAD_TOO_LARGE,
                "\"text\" is over 1 MiB",
            ));
        }
        Some(Value::String(t)) => t.to_string(),
        None | Some(Value::Null) => String::new(),
        Some(_) => {
            return Err(error(StatusCode::BAD_REQUEST, "\"text\" must be a string"));
        }
    };
    let images = match value.get("images") {
        None | Some(Value::Null) => Vec::new(),
        Some(images) => {
            let images = images.clone();
            tokio::task::spawn_blocking(move || checked_images(&images))
                .await
                .map_err(|e| error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()))?
                .map_err(|why| error(StatusCode::BAD_REQUEST, &why))?
        }
    };
    // An image may be the whole message; otherwise there must be text.
    if text.trim().is_empty() && images.is_empty() {
        return Err(error(
            StatusCode::BAD_REQUEST,
            "the body needs a non-empty string \"text\" or at least one image in \"images\"",
        ));
    }
    let id = |key: &str| -> Result<Option<String>, String> {
        match value.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(id)) if dsh_session::is_plain_id(id) => Ok(Some(id.clone())),
            Some(_) => Err(format!(
                "\"{key}\" must be 1 to 128 letters, digits, '.', '_' or '-'"
            )),
        }
    };
    let refuse = |why: String| error(StatusCode::BAD_REQUEST, &why);
    Ok(Input {
        text,
        session_id: id("sessionId").map_err(refuse)?,
        message_id: id("messageId").map_err(refuse)?,
        route: crate::route::Route::from_request(&value).map_err(refuse)?,
        cwd: crate::route::directory(&value).map_err(refuse)?,
        images,
        answers_approvals: match value.get("answersApprovals") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => {
                return Err(refuse(
                    "\"answersApprovals\" must be true or false".to_string(),
                ));
            }
        },
    })
}
