interface ToolArgsMap {
  /** Run a shell command with `bash -c` and return what it printed on stdout and stderr. Every call starts a new shell, so nothing carries over between calls (working directory, variables, functions); set `workdir` instead of running `cd`. A non-zero exit status is reported as an `[exit code: N]` marker. Facts about the running harness are available to the command as managed `$DSH_*` environment variables. File access may be restricted by a sandbox: a refused file operation shows up as `[sandbox: file access denied under <mode> mode]`, which is a policy decision rather than a fault in the command, so do not look for another way around it. Very long output keeps only its end; when the complete output could be saved, the file path is given. For commands that run for a long time, set `run_in_background: true`: the call returns a job id at once, `job_output` reads what the job printed and `job_kill` stops it. Running a command that the sandbox might refuse is fine: run it and read the marker instead of guessing. If a command was refused and a wider mode would let it work, retry that exact command once, in the same turn, with `sandbox_permissions` set to the narrowest wider mode that is enough and a one-sentence `justification`; the approval prompt this raises is how the user agrees, so do not stop to ask in chat first. If the session says approval prompts are disabled, a refusal is final and `sandbox_permissions` must not be used. Only escalate after a real refusal (normally the one this command just got, or the same access refused earlier in this session). When the user rejects an escalation, stop and explain; do not work around it, though other commands may still be run or escalated later. */
  bash: {
    /** A short active-voice summary of what the command does, about 5-10 words, shown to the user (for example "List files in the current directory" for `ls`). */
    description: string;
    /** The command line to run. */
    command: string;
    /** Timeout in milliseconds; the configured default and maximum apply, and the command is killed when it expires. */
    timeoutMs?: number;
    /** Directory to run the command in. Defaults to the session workspace; a relative path is taken relative to it. */
    workdir?: string;
    /** Start the command as a background job and return its id immediately (read it with job_output, stop it with job_kill); no timeout applies. */
    run_in_background?: boolean;
    /** A wider sandbox mode for this one command. Only for retrying a command the sandbox just refused; needs a justification and the user's approval. */
    sandbox_permissions?: "workspace-write" | "danger-full-access";
    /** Goes with sandbox_permissions: one sentence telling the user why this command needs the wider access. */
    justification?: string;
  } & Record<string, JsonValue>;
  /** Sets a goal for this session that is saved in the log and keeps the agent working on it over automatic follow-up rounds. Call it when the person asks for an objective that will take several turns, whether or not they use the word goal; a task one turn can finish needs none. */
  create_goal: {
    /** What finished looks like, taken from what the person asked for. */
    objective: string;
    /** How many automatic rounds the goal may use at most (a whole number from 1). */
    max_goal_rounds?: number;
  } & Record<string, JsonValue>;
  /** Swaps one exact snippet of an existing UTF-8 file for new text (or every copy of it with replace_all). */
  edit: {
    /** The file to change; relative paths start at the session workspace. */
    file_path: string;
    /** The exact text to find, character for character. */
    old_string: string;
    /** The text to put in its place; an empty string deletes the match. */
    new_string: string;
    /** Replace every occurrence. Defaults to false, in which case old_string has to occur exactly once. */
    replace_all?: boolean;
    /** A wider sandbox mode for this one file operation. Only for retrying an operation the sandbox just refused; needs a justification and the user's approval. */
    sandbox_permissions?: "workspace-write" | "danger-full-access";
    /** Goes with sandbox_permissions: one sentence telling the user why this file operation needs the wider access. */
    justification?: string;
  } & Record<string, JsonValue>;
  /** Only for plan mode: submit your finished plan for the user to review, and leave plan mode if they approve it. Pass the whole plan as markdown whose first line is a # heading naming it. On approval, carry the plan out from your next step; if the user wants more planning, their feedback arrives in the tool result — revise the plan and submit it again. */
  exit_plan_mode: {
    /** The whole plan in markdown, beginning with a # heading that names it. */
    plan: string;
  } & Record<string, JsonValue>;
  /** Removes one memory entry by the id shown in brackets in the memory section or returned by recall. */
  forget: {
    /** The entry id. */
    id: string;
  } & Record<string, JsonValue>;
  /** Returns this session's goal, with the id and revision update_goal asks for. */
  get_goal: Record<string, JsonValue>;
  /** Lists the files (not directories) below a directory whose paths fit a glob. Hidden and git-ignored files count; version-control metadata directories are skipped. A result of at most 100 paths is ordered oldest modification first; beyond that you get the 100 oldest paths, states that it did, and names where the full sorted list went. Not a directory listing tool. */
  glob: {
    /** The glob to match paths against, e.g. "**\/*.rs" or "src/**\/*.test.ts". Without a "/" it matches file names at any depth ("*" and "*.rs" cover the whole tree); add a separator to anchor it. */
    pattern: string;
    /** The directory to search. Defaults to the session workspace; relative paths start there. */
    path?: string;
  } & Record<string, JsonValue>;
  /** Looks for a ripgrep regular expression inside files and reports each hit as a numbered line under its file. Up to 250 hits are shown in the result; past that, it names where the full list was stored. To see what surrounds a hit, read that file. */
  grep: {
    /** The regular expression to look for, in ripgrep syntax. */
    pattern: string;
    /** A file or directory to search. Defaults to the session workspace; relative paths start there. */
    path?: string;
    /** A single glob restricting which files are searched, e.g. "*.rs" or "*.{ts,tsx}". One glob only, and no "!" negation. */
    include?: string;
  } & Record<string, JsonValue>;
  /** Stop what a background subagent below you is doing right now. Messages already queued for it stay queued; it is not deleted and can be continued later. */
  interrupt_agent: {
    /** The id of a subagent you started, or of one started below it. */
    agent_id: string;
  } & Record<string, JsonValue>;
  /** Ask a running background job to stop. Returns at once; the job shows as killed once its work has actually stopped. */
  job_kill: {
    /** The job id that the tool which started the work returned. */
    job_id: string;
    /** A short reason, passed to the job and kept in the log. */
    reason?: string;
  } & Record<string, JsonValue>;
  /** Show every background job you started, running or finished: id, kind, status and label. */
  job_list: Record<string, JsonValue>;
  /** Read what a background job produced. Streaming jobs return only the output since your previous read; jobs with a final result return it once they finish. Every answer ends with a `[status: ...]` line. A read returns at once unless `wait: true`, which blocks until the job finishes or the wait times out. */
  job_output: {
    /** The job id that the tool which started the work returned. */
    job_id: string;
    /** Block until the job finishes or the timeout passes. When the wait times out the job keeps running and the answer shows [status: running]. */
    wait?: boolean;
    /** Longest wait in milliseconds (with wait: true only). Defaults to the configured wait; the configured maximum caps it. */
    timeout_ms?: number;
  } & Record<string, JsonValue>;
  /** List the continuable background subagents you started, with their ids and labels, to recall what exists (you are told when one finishes, so do not poll). running: working now; idle: loaded, between turns; ready: only stored, continue it with send_message. Children that cannot be read show as diagnostics. With scope `descendants` the whole tree below you is listed in pre-order with each entry's parent id and depth; only depth-1 entries accept send_message, deeper ones only interrupt_agent. */
  list_agents: {
    /** children (the default): your direct subagents; descendants: everything below you. */
    scope?: "children" | "descendants";
  } & Record<string, JsonValue>;
  /** Run a Ralph loop in the foreground: fresh agents work toward one fixed objective, one round at a time. Use it only when the user explicitly asks for Ralph or for fresh-agent iteration. Every round starts a new child that sees neither this conversation nor earlier rounds' sessions; the shared workspace is what persists, and only a short structured report is handed from one round to the next. The call returns when a worker reports the objective complete, reports a concrete blocker, or the round limit is reached. Ordinary long work within this session belongs to the goal tools instead. */
  ralph: {
    /** The objective every fresh round works toward; it never changes. */
    objective: string;
    /** Optional round limit: a positive whole number no larger than the deployment's ceiling. */
    maxRounds?: number;
  } & Record<string, JsonValue>;
  /** Returns lines of a UTF-8 text file, each prefixed by its line number. */
  read: {
    /** The file to read; relative paths start at the session workspace. */
    file_path: string;
    /** Line number (1-based) to start reading at. Defaults to 1. */
    offset?: number;
    /** How many lines to return at most. Defaults to 2000. */
    limit?: number;
  } & Record<string, JsonValue>;
  /** Look at an image file (PNG, JPEG, WebP or GIF): the image itself comes back to you. Oversized images are checked and scaled down automatically (the result then says how to map coordinates back to the original), so there is no need to install image tools or make thumbnails first. Several images can be read in parallel. Works only when the current model accepts image input. */
  read_image: {
    /** Path to the image file, resolved by the filesystem backend. */
    file_path: string;
  } & Record<string, JsonValue>;
  /** Searches memory: entries whose text or tags hold the query's words, best match and newest first; without a query the newest entries. With a query it also lists earlier sessions of this workspace that mention it, with the session id and event seq to read them by. */
  recall: {
    /** Words to look for; leave out for the newest entries. */
    query?: string;
    /** workspace, user or all (default). */
    scope?: "workspace" | "user" | "all";
    /** How many memories at most (default 10). */
    limit?: number;
    /** Whether to search earlier sessions too (default true; needs a query). */
    sessions?: boolean;
  } & Record<string, JsonValue>;
  /** Keeps one fact for later sessions: workspace scope (the project's .dsh/memory.md) or user scope (the person's own memory for every project). Duplicates are recognised; secrets are removed before anything is written. */
  remember: {
    /** The fact, short and self-contained, as a later session should read it. */
    text: string;
    /** workspace (default) for this project, user for the person's preferences in every project. */
    scope?: "workspace" | "user";
    /** Optional keywords that help recall find it. */
    tags?: string[];
  } & Record<string, JsonValue>;
  /** Give one of your continuable background subagents another turn: the message is queued as its next turn, in order, whether it is working, idle or only stored. Use the id the subagent tool returned. */
  send_message: {
    /** The durable id of a subagent you started. */
    agent_id: string;
    /** What the subagent should do next; it keeps its own conversation so far. */
    message: string;
  } & Record<string, JsonValue>;
  /** Read one event of a session in full, as JSON, optionally with a short summary of each event just before and after it. */
  session_event_read: {
    /** Session of the event: the current one if omitted, otherwise a session of this workspace. */
    session_id?: string;
    /** Sequence number of the event. */
    seq: number;
    /** How many earlier events to summarize with it (default 0). */
    before?: number;
    /** How many later events to summarize with it (default 0). */
    after?: number;
  } & Record<string, JsonValue>;
  /** Find events of one session that contain a phrase. In the current session, events of the step making this call are not searched. */
  session_event_search: {
    /** Session to search: the current one if omitted, otherwise a session of this workspace. */
    session_id?: string;
    /** Text to find; its words must occur together and in this order. */
    query: string;
    /** Match only events with this sequence number or a higher one. */
    seq_from?: number;
    /** Match only events with this sequence number or a lower one. */
    seq_to?: number;
    /** Match only events recorded at or after this time (ISO 8601 with a time zone). */
    time_from?: string;
    /** Match only events recorded at or before this time (ISO 8601 with a time zone). */
    time_to?: string;
    /** Match only events of these types. */
    event_types?: string[];
    /** Match only events in these states: current (still part of the conversation), shadowed (since replaced) or log-only (never part of it). */
    surfaces?: ("current" | "shadowed" | "log-only")[];
  } & Record<string, JsonValue>;
  /** Show how one event of a session is linked to others: the event that replaced it and the rest of that replacement chain, the events it replaced, the events it cites as sources, and the events derived from it. */
  session_event_trace: {
    /** Session of the event: the current one if omitted, otherwise a session of this workspace. */
    session_id?: string;
    /** Sequence number of the event. */
    seq: number;
  } & Record<string, JsonValue>;
  /** Find earlier sessions of this workspace (not the current one) whose history contains a phrase. Lists the best-matching event of each session, best sessions first. */
  session_search: {
    /** Text to find; its words must occur together and in this order. */
    query: string;
    /** Consider only these sessions. */
    session_ids?: string[];
    /** Consider only sessions created at or after this time (ISO 8601 with a time zone). */
    created_at_from?: string;
    /** Consider only sessions created at or before this time (ISO 8601 with a time zone). */
    created_at_to?: string;
    /** Consider only sessions whose parent is one of these sessions. */
    parent_session_ids?: string[];
    /** Whether sessions without a parent count. With parent_session_ids, true adds them; without it, false leaves them out. */
    include_root_sessions?: boolean;
    /** Consider only sessions found in at least one of these places: live (open in this process) or persisted (saved on disk). */
    availability?: ("live" | "persisted")[];
    /** Match only events with this sequence number or a higher one. */
    event_seq_from?: number;
    /** Match only events with this sequence number or a lower one. */
    event_seq_to?: number;
    /** Match only events recorded at or after this time (ISO 8601 with a time zone). */
    event_time_from?: string;
    /** Match only events recorded at or before this time (ISO 8601 with a time zone). */
    event_time_to?: string;
    /** Match only events of these types. */
    event_types?: string[];
    /** Match only events in these states: current (still part of the conversation), shadowed (since replaced) or log-only (never part of it). */
    event_surfaces?: ("current" | "shadowed" | "log-only")[];
  } & Record<string, JsonValue>;
  /** Show where a session sits in its family: its ancestors (nearest first) and all of its descendants, each with title, creation time and availability. Relatives outside this workspace appear only as placeholders. */
  session_trace: {
    /** Session to trace: the current one if omitted, otherwise a session of this workspace. */
    session_id?: string;
  } & Record<string, JsonValue>;
  /** Fetch the complete instructions of a skill from this session's skill catalog. Use it before working on a task that names a skill or plainly fits one, passing the skill's exact name. */
  skill: {
    /** The skill's name, exactly as the catalog lists it. */
    name: string;
  } & Record<string, JsonValue>;
  /** File editor working on absolute paths, with four commands. * `view`: a file is shown with numbered lines (like `cat -n`), optionally only a `view_range`; a directory is listed two levels deep without hidden entries * `create`: writes a new file from `file_text`; it fails if the path is already taken * `str_replace`: swaps `old_str` for `new_str`; `old_str` must match the file exactly (whitespace too) and occur only once, so include enough neighbouring lines to make it unique * `insert`: puts `new_str` after line `insert_line` (0 = top of the file) * Edits are real file changes and persist; very long output is cut short and marked `<response clipped>` */
  str_replace_editor: {
    /** What to do: `view`, `create`, `str_replace` or `insert`. */
    command: "view" | "create" | "str_replace" | "insert";
    /** Absolute path of the file or directory, such as `/repo/main.py` or `/repo`. */
    path: string;
    /** For `create` (required): the full contents of the new file. */
    file_text?: string;
    /** For `insert` (required): `new_str` goes in after this line of `path` (0 puts it at the top). */
    insert_line?: number;
    /** For `str_replace` (optional, defaults to nothing): the replacement text. For `insert` (required): the text to insert. */
    new_str?: string;
    /** For `str_replace` (required): the exact text in `path` to replace. */
    old_str?: string;
    /** For `view` of a file (optional): the 1-based line range to show, e.g. [11, 12] for lines 11 and 12; `[start, -1]` shows from `start` to the end. Without it the whole file is shown. */
    view_range?: number[];
  } & Record<string, JsonValue>;
  /** Hand a self-contained task to a subagent: a separate agent with its own, empty context, so focused work (research, a scoped change, an analysis) does not fill this conversation. It knows nothing of this conversation, so the prompt must stand on its own. You get back its result, not its steps. By default it runs in the background: the call returns the subagent's durable id at once, a notice with its outcome and final message arrives when it finishes, and `send_message` gives the same subagent another turn later. Pass `run_in_background: false` only when your next step needs the result. */
  subagent: {
    /** Where the subagent starts: a directory inside your workspace, relative to your current directory or absolute. Without it the subagent starts where you started. Each side's later directory changes stay its own. */
    cwd?: string;
    /** A short label for the task (3-5 words), shown to the user. */
    description: string;
    /** The whole task for the subagent, self-contained: it does not see this conversation, so include everything it needs. */
    prompt: string;
    /** Run in the background and get the subagent's durable id at once (the default: true). Pass false to wait for the result. */
    run_in_background?: boolean;
  } & Record<string, JsonValue>;
  /** Hand a task to a subagent that starts from this conversation: it is seeded with every turn that has already finished (not the one in progress) and works in its own context, so the work does not fill this one. Suited to follow-ups that build on what was said: a review, a deeper analysis, a continuation. You get back its result, not its steps. By default the call waits for the result. With `run_in_background: true` it returns a job id instead; read the result with `job_output`, stop it with `job_kill`. */
  subagent_fork: {
    /** Where the subagent starts: a directory inside your workspace, relative to your current directory or absolute. Without it the subagent starts where you started. Each side's later directory changes stay its own. */
    cwd?: string;
    /** A short label for the task (3-5 words), shown to the user. */
    description: string;
    /** What the subagent should do. It already sees the finished turns of this conversation, so say only what is new. */
    prompt: string;
    /** Run as a background job and get its id (the default: false); collect it with job_output, stop it with job_kill. */
    run_in_background?: boolean;
  } & Record<string, JsonValue>;
  /** Maintains the checklist for the task in progress. Each call carries the FULL checklist and overwrites whatever was there; single items cannot be patched. Reach for it when a job takes several steps: write down one todo per concrete step up front, then keep the statuses current so progress is visible. Any todo you are working on right now is `in_progress`; that can be several when work truly happens side by side (subagents, background commands running together) and is one when you work step by step. As long as anything is left to do, something should be `in_progress`. Flip a todo to `completed` the moment it is finished instead of saving completions up; nothing stays `in_progress` once everything is done. A one-step job needs no checklist. The statuses are `pending` (not begun), `in_progress` (under way) and `completed` (finished). */
  todo_write: {
    /** The COMPLETE task list; it replaces the previous one. */
    todos: ({
      /** The task, as one short imperative line. */
      content: string;
      /** pending (not started), in_progress (now) or completed (done). */
      status: "pending" | "in_progress" | "completed";
    })[];
  } & Record<string, JsonValue>;
  /** Changes the session's goal. */
  update_goal: {
    /** The goal id exactly as get_goal reported it. */
    goal_id: string;
    /** The revision exactly as get_goal reported it (from 1). */
    revision: number;
    /** Only a person asking directly, to a top-level agent, allows edit, pause or resume. An automatic round of this goal may also report complete or blocked; blocked is refused until the configured number of rounds has run. */
    action: "edit" | "pause" | "resume" | "complete" | "blocked";
    /** The new objective; only for edit. */
    objective?: string;
    /** The new round limit; only for edit. */
    max_goal_rounds?: number;
    /** Only for blocked, and required there: the specific obstacle that stayed the same over several rounds and stops any progress. */
    blocked_reason?: string;
  } & Record<string, JsonValue>;
  /** Fetch one http(s) URL and return its content as text (web pages are converted to Markdown). */
  web_fetch: {
    /** The http(s) URL to fetch. */
    url: string;
  } & Record<string, JsonValue>;
  /** Search the web for current information. Give 1 to 4 queries in `queries`; the answer is an optional summary plus the source URLs. */
  web_search: {
    /** Search queries, 1 to 4; their results are merged. */
    queries: string[];
  } & Record<string, JsonValue>;
  /** Run a workflow: a JavaScript script that coordinates many subagents. Reach for it when the work splits into many independent pieces (a review of many files, a migration, research from several angles, cross-checking findings) and the coordination is easier to write as code than to delegate call by call. Arguments: `meta` is plain JSON naming the workflow: `name` (short, kebab-case) and `description` are required; `whenToUse` (string) and `phases` (a list of `{title, detail?, provider?, model?}`) are optional. `script` is only the body of an async JavaScript function (plain JavaScript, not TypeScript; do not declare meta in it). Top-level `await` works; finish with `return <value>`, and that value, which must be plain JSON, is the tool's result. `args` (optional JSON object) is handed to the script as the global `args`. Available in the script: - `agent(prompt, opts?)` runs one subagent to the end and resolves to its final text, or, with `opts.schema` (an object JSON Schema limited to type, properties, required, additionalProperties, items, enum, const and oneOf), to the validated object. It resolves to `null` if the child fails, so filter results with `.filter(Boolean)`. Further options: `label` (display name), `phase` (progress group), `provider` and `model` (route overrides, each usable alone). Any other option, such as `effort`, `isolation` or `agentType`, is an error. - `pipeline(items, ...stages)` sends every item through the stages on its own, without waiting for the other items between stages; a stage is called with `(prev, item, index)`. If a stage throws, that item becomes `null` and skips its later stages. Prefer it for multi-step work. - `parallel(thunks)` runs functions without arguments at the same time and waits for all of them; a thunk that throws gives `null`. Use it only when a step needs every earlier result at once. - `phase(title)` opens a progress phase; `log(message)` reports progress. Misusing a hook (wrong arguments, an unknown option, an unsupported schema, a cap reached) always ends the whole script; it is never turned into a `null` item. Limits: the number of subagents running at once and in total is capped. The script has no filesystem, network, timers or Node.js APIs: the subagents do the work, the script only coordinates. The call runs in the foreground and returns when the script has finished. */
  workflow: {
    /** The body of the workflow's async function, in plain JavaScript (top-level await works; no meta declaration; end with `return <json-value>`). */
    script: string;
    /** The workflow's identity, as plain JSON (not code). */
    meta: {
      /** A short kebab-case name for the workflow. */
      name: string;
      /** One line saying what the workflow does. */
      description: string;
      /** Optional: when this workflow is the right tool. */
      whenToUse?: string;
      /** Optional: the phases the script opens with phase(). */
      phases?: ({
        /** The title phase() is called with. */
        title: string;
        /** Optional: one line about the phase. */
        detail?: string;
        /** Optional: which provider the phase's agents are planned to use (a note only; agent() takes its own `provider` option). */
        provider?: string;
        /** Optional: which model the phase's agents are planned to use (a note only; agent() takes its own `model` option). */
        model?: string;
      } & Record<string, JsonValue>)[];
    } & Record<string, JsonValue>;
    /** Optional JSON input, available to the script as the global `args` (put a list inside a field, e.g. {"items": [...]}). */
    args?: Record<string, JsonValue>;
    /** Start the workflow as a background job and get its job id at once; its return value comes with the notice that it finished (job_output reads it, job_kill stops it). */
    run_in_background?: boolean;
  } & Record<string, JsonValue>;
  /** Shows the session's working directory, or moves the session into another existing directory when `cd` is given (relative to the current one). Later tool calls start there; shells and processes already running stay where they are. */
  working_directory: {
    /** An existing directory to move to; leave it out to only read the current one. */
    cd?: string;
  } & Record<string, JsonValue>;
  /** Writes a whole UTF-8 text file: makes it if it is missing, otherwise overwrites all of it. */
  write: {
    /** The file to write; relative paths start at the session workspace. */
    file_path: string;
    /** The complete new contents of the file, as UTF-8 text. */
    content: string;
    /** A wider sandbox mode for this one file operation. Only for retrying an operation the sandbox just refused; needs a justification and the user's approval. */
    sandbox_permissions?: "workspace-write" | "danger-full-access";
    /** Goes with sandbox_permissions: one sentence telling the user why this file operation needs the wider access. */
    justification?: string;
  } & Record<string, JsonValue>;
}

interface ToolOutputMap {
  bash: {
    kind: "background";
    jobId: string;
  } | {
    kind: "foreground";
    exitCode: number | null;
    signal: string | null;
    timedOut: boolean;
    aborted: boolean;
    timeoutMs: number;
    stdout: {
      text: string;
      truncated: boolean;
      spillPath?: string;
    };
    stderr: {
      text: string;
      truncated: boolean;
      spillPath?: string;
    };
    sandbox?: {
      mode: string;
      denied: boolean;
      enforcement?: string;
      runnerFailed?: boolean;
    };
  };
  create_goal: {
    goal: null;
  } | {
    goal: {
      id: string;
      revision: number;
      objective: string;
      phase: "active" | "paused" | "blocked" | "complete";
      roundsStarted: number;
      maxGoalRounds: number;
      blockedReason?: {
        code: string;
        message: string;
      };
    };
    activation: "armed" | "disarmed";
  };
  edit: {
    path: string;
    before: string;
    after: string;
  };
  exit_plan_mode: JsonValue;
  forget: JsonValue;
  get_goal: {
    goal: null;
  } | {
    goal: {
      id: string;
      revision: number;
      objective: string;
      phase: "active" | "paused" | "blocked" | "complete";
      roundsStarted: number;
      maxGoalRounds: number;
      blockedReason?: {
        code: string;
        message: string;
      };
    };
    activation: "armed" | "disarmed";
  };
  glob: {
    root: string;
    paths: string[];
  };
  grep: {
    matches: {
      path: string;
      lineNumber: number;
      line: string;
    }[];
  };
  interrupt_agent: {
    accepted: boolean;
  };
  job_kill: {
    outcome: "cancellation-requested" | "already-finished";
    job: {
      id: string;
      kind: string;
      label: string;
      status: "running" | "stopping" | "completed" | "killed" | "failed";
      detail?: string;
      startedAt: number;
      finishedAt?: number;
    };
  };
  job_list: ({
    id: string;
    kind: string;
    label: string;
    status: "running" | "stopping" | "completed" | "killed" | "failed";
    detail?: string;
    startedAt: number;
    finishedAt?: number;
  })[];
  job_output: {
    text: string;
    job: {
      id: string;
      kind: string;
      label: string;
      status: "running" | "stopping" | "completed" | "killed" | "failed";
      detail?: string;
      startedAt: number;
      finishedAt?: number;
    };
  };
  list_agents: ({
    kind: "child";
    id: string;
    label: string;
    status: "running" | "idle" | "ready";
    parent?: string;
    depth?: number;
  } | {
    kind: "diagnostic";
    id: string;
    reason: "corrupt" | "unsupported" | "unavailable";
    parent?: string;
    depth?: number;
  })[];
  ralph: {
    runId?: string;
    agentsStarted: number;
    result: JsonValue;
  };
  read: {
    path: string;
    offset: number;
    lines: {
      number: number;
      text: string;
    }[];
    totalLines: number;
  };
  read_image: {
    path: string;
    image: {
      attachmentId: string;
      mediaType: "image/png" | "image/jpeg" | "image/webp" | "image/gif";
      bytes: number;
      width: number;
      height: number;
      name?: string;
      originalDimensions?: {
        width: number;
        height: number;
      };
    };
  };
  recall: JsonValue;
  remember: JsonValue;
  send_message: {
    messageId: string;
  };
  session_event_read: JsonValue;
  session_event_search: JsonValue;
  session_event_trace: JsonValue;
  session_search: JsonValue;
  session_trace: JsonValue;
  skill: {
    name: string;
    provider: string;
    resourceBase?: {
      kind: "directory";
      path: string;
    } | {
      kind: "url";
      url: string;
    } | {
      kind: "opaque";
      description: string;
    };
    content: string;
  };
  str_replace_editor: string;
  subagent: {
    kind: "background";
    jobId: string;
  } | {
    kind: "continuable";
    subagentId: string;
  } | {
    kind: "foreground";
    runId: string;
    output: JsonValue[];
  };
  subagent_fork: {
    kind: "background";
    jobId: string;
  } | {
    kind: "continuable";
    subagentId: string;
  } | {
    kind: "foreground";
    runId: string;
    output: JsonValue[];
  };
  todo_write: {
    todos: ({
      content: string;
      status: "pending" | "in_progress" | "completed";
    })[];
    counts: {
      pending: number;
      inProgress: number;
      completed: number;
    };
  };
  update_goal: {
    goal: null;
  } | {
    goal: {
      id: string;
      revision: number;
      objective: string;
      phase: "active" | "paused" | "blocked" | "complete";
      roundsStarted: number;
      maxGoalRounds: number;
      blockedReason?: {
        code: string;
        message: string;
      };
    };
    activation: "armed" | "disarmed";
  };
  web_fetch: {
    url: string;
    statusCode: number;
    body: {
      kind: "html";
      content: string;
    } | {
      kind: "text";
      content: string;
    };
    truncated: boolean;
  };
  web_search: {
    content?: string;
    sources: {
      url: string;
      title?: string;
      snippet?: string;
      publishedAt?: string;
    }[];
    truncated: boolean;
  };
  workflow: {
    runId: string;
    agentsStarted: number;
    result: JsonValue;
  };
  working_directory: JsonValue;
  write: {
    path: string;
    operation: "create" | "update";
    before: string | null;
    after: string;
  };
}
