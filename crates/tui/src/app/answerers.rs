//! Approvals and questions answered from the keyboard: the seams the agent asks through, turned
//! into panels the key handlers resolve.

use super::*;

/// Approvals answered from the keyboard.
pub(super) struct KeyboardApprovals {
    pub(super) tx: mpsc::UnboundedSender<Incoming>,
}

/// What the user sees of a request: the command of a shell call, else the arguments.
pub(super) fn approval_detail(request: &ApprovalRequest) -> String {
    let args = match &request.arguments {
        Value::String(s) => serde_json::from_str(s).unwrap_or(Value::String(s.clone())),
        other => other.clone(),
    };
    let mut out = match args.get("command").and_then(Value::as_str) {
        Some(c) => c.to_string(),
        None => serde_json::to_string_pretty(&args).unwrap_or_default(),
    };
    for key in ["sandbox_permissions", "justification", "cwd", "workdir"] {
        if let Some(v) = args.get(key)
            && !v.is_null()
            && args.get("command").is_some()
        {
            let v = v.as_str().map_or_else(|| v.to_string(), str::to_owned);
            out.push_str(&format!("\n{key}: {v}"));
        }
    }
    out
}

impl ApprovalAnswerer for KeyboardApprovals {
    fn ask(&self, request: ApprovalRequest) -> BoxFuture<'static, ApprovalOutcome> {
        let (answer, answered) = oneshot::channel();
        let pending = PendingApproval {
            tool_name: request.tool_name.clone(),
            detail: approval_detail(&request),
            reason: request.reason.clone().unwrap_or_default(),
            answer: Some(answer),
        };
        let sent = self.tx.send(Incoming::Approval(pending)).is_ok();
        let cancel = request.cancel.clone();
        Box::pin(async move {
            if !sent {
                return ApprovalOutcome::Unavailable;
            }
            tokio::select! {
                a = answered => a.unwrap_or(ApprovalOutcome::Cancelled),
                () = cancel.cancelled() => ApprovalOutcome::Cancelled,
            }
        })
    }
}

/// Questions answered from the keyboard.
pub(super) struct KeyboardQuestions {
    pub(super) tx: mpsc::UnboundedSender<Incoming>,
}

impl QuestionProvider for KeyboardQuestions {
    fn ask(&self, request: AskRequest) -> BoxFuture<'static, Result<Answer, dsh_kernel::BoxError>> {
        let (reply, replied) = oneshot::channel();
        let chosen = vec![
            false;
            request
                .questions
                .first()
                .and_then(|q| q.options.as_ref())
                .map_or(0, Vec::len)
        ];
        let pending = PendingQuestions {
            questions: request.questions,
            at: 0,
            cursor: 0,
            chosen,
            custom: String::new(),
            answers: Vec::new(),
            reply: Some(reply),
        };
        let sent = self.tx.send(Incoming::Questions(pending)).is_ok();
        Box::pin(async move {
            if !sent {
                return Err(question_error("NO_PROVIDER", "the terminal UI is closing"));
            }
            match replied.await {
                Ok(Some(answer)) => Ok(answer),
                Ok(None) => Err(question_error(
                    "ASK_CANCELLED",
                    "the user closed the question to reply in the conversation instead",
                )),
                Err(_) => Err(question_error(
                    "ASK_ABORTED",
                    "ask_user_question was aborted before the user answered",
                )),
            }
        })
    }
}
