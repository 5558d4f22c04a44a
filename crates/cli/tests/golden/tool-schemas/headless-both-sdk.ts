interface ToolArgsMap {
  /** <1711 chars, fnv1a e3fec2b4e9fec87b> */
  bash: {
    /** <152 chars, fnv1a 5ca64f2d85eeb5e1> */
    description: string;
    /** <24 chars, fnv1a ed0067c41fc7271b> */
    command: string;
    /** <109 chars, fnv1a 565b8116988612cc> */
    timeoutMs?: number;
    /** <108 chars, fnv1a 8bc478d76aaa6058> */
    workdir?: string;
    /** <137 chars, fnv1a ca320d546b08f1f2> */
    run_in_background?: boolean;
    /** <143 chars, fnv1a a8c1772b82d4bbcf> */
    sandbox_permissions?: "workspace-write" | "danger-full-access";
    /** <101 chars, fnv1a f9af5799c4de6b9f> */
    justification?: string;
  } & Record<string, JsonValue>;
  /** <274 chars, fnv1a 50d4d9cd8dc1b70e> */
  create_goal: {
    /** <63 chars, fnv1a 851753c97cad4544> */
    objective: string;
    /** <75 chars, fnv1a c320e75fe1f2515f> */
    max_goal_rounds?: number;
  } & Record<string, JsonValue>;
  /** <102 chars, fnv1a cbfa8362b8cf5dd8> */
  edit: {
    /** <66 chars, fnv1a 8064d72167ed4939> */
    file_path: string;
    /** <48 chars, fnv1a 676a532ddcaaca59> */
    old_string: string;
    /** <64 chars, fnv1a 269994f6c8a08163> */
    new_string: string;
    /** <96 chars, fnv1a 7b3dc01e1ee9f2a4> */
    replace_all?: boolean;
    /** <153 chars, fnv1a ffb0ea9259751f11> */
    sandbox_permissions?: "workspace-write" | "danger-full-access";
    /** <108 chars, fnv1a c92f3201c68965f7> */
    justification?: string;
  } & Record<string, JsonValue>;
  /** <351 chars, fnv1a e3adff61628719f7> */
  exit_plan_mode: {
    /** <69 chars, fnv1a db1ab277fcd4dc41> */
    plan: string;
  } & Record<string, JsonValue>;
  /** <97 chars, fnv1a 6ac3fad25cc89eed> */
  forget: {
    /** <13 chars, fnv1a fd748c5c723ece01> */
    id: string;
  } & Record<string, JsonValue>;
  /** <75 chars, fnv1a 6ce8ddde4969417b> */
  get_goal: Record<string, JsonValue>;
  /** <364 chars, fnv1a 691635b6c9bf63ad> */
  glob: {
    /** <190 chars, fnv1a 99403003cbe48a22> */
    pattern: string;
    /** <87 chars, fnv1a 69117fd0c0eae664> */
    path?: string;
  } & Record<string, JsonValue>;
  /** <244 chars, fnv1a 38e94ed0f6c5ae07> */
  grep: {
    /** <54 chars, fnv1a a451db6c512dbc22> */
    pattern: string;
    /** <93 chars, fnv1a a91bc83992bef09b> */
    path?: string;
    /** <116 chars, fnv1a 71f6bea0aba611a5> */
    include?: string;
  } & Record<string, JsonValue>;
  /** <151 chars, fnv1a 592b73ae1c450ada> */
  interrupt_agent: {
    /** <61 chars, fnv1a b2d40194048cfdf1> */
    agent_id: string;
  } & Record<string, JsonValue>;
  /** <114 chars, fnv1a abeec301868e7bfb> */
  job_kill: {
    /** <57 chars, fnv1a cf1dbcd253e0a6cb> */
    job_id: string;
    /** <54 chars, fnv1a 6b470fb230bd3c0a> */
    reason?: string;
  } & Record<string, JsonValue>;
  /** <87 chars, fnv1a 74e25877426b3fd0> */
  job_list: Record<string, JsonValue>;
  /** <303 chars, fnv1a 234e266e63b66be5> */
  job_output: {
    /** <57 chars, fnv1a cf1dbcd253e0a6cb> */
    job_id: string;
    /** <137 chars, fnv1a e7e4f929ee88f8b5> */
    wait?: boolean;
    /** <117 chars, fnv1a d8365bd12f46f768> */
    timeout_ms?: number;
  } & Record<string, JsonValue>;
  /** <493 chars, fnv1a 04cf43a1f9ec307e> */
  list_agents: {
    /** <81 chars, fnv1a fdf798844fdebd71> */
    scope?: "children" | "descendants";
  } & Record<string, JsonValue>;
  /** <589 chars, fnv1a ffc38b904ab44077> */
  ralph: {
    /** <63 chars, fnv1a 005e1bf6b99beeee> */
    objective: string;
    /** <86 chars, fnv1a d9862b648a34d544> */
    maxRounds?: number;
  } & Record<string, JsonValue>;
  /** <69 chars, fnv1a ef2fb08b1df9e9d0> */
  read: {
    /** <64 chars, fnv1a a4ae920fc4a91b39> */
    file_path: string;
    /** <57 chars, fnv1a 9e381829a9370f1a> */
    offset?: number;
    /** <51 chars, fnv1a 2875cb38129b76bb> */
    limit?: number;
  } & Record<string, JsonValue>;
  /** <374 chars, fnv1a aa658434f120c910> */
  read_image: {
    /** <59 chars, fnv1a 998c83593dd62a4e> */
    file_path: string;
  } & Record<string, JsonValue>;
  /** <262 chars, fnv1a 0f2a001663bd13f6> */
  recall: {
    /** <52 chars, fnv1a fe862798334f1a91> */
    query?: string;
    /** <33 chars, fnv1a 43c008f39cd04c4d> */
    scope?: "workspace" | "user" | "all";
    /** <39 chars, fnv1a 4e4b161dc242f7fe> */
    limit?: number;
    /** <69 chars, fnv1a f332239a29186581> */
    sessions?: boolean;
  } & Record<string, JsonValue>;
  /** <215 chars, fnv1a 5fe98f2d09abb6d9> */
  remember: {
    /** <70 chars, fnv1a 2e1eb4af5eb04bb4> */
    text: string;
    /** <89 chars, fnv1a 873343414b18a93f> */
    scope?: "workspace" | "user";
    /** <43 chars, fnv1a 79b914a798688356> */
    tags?: string[];
  } & Record<string, JsonValue>;
  /** <196 chars, fnv1a b5f0f7c161944d09> */
  send_message: {
    /** <41 chars, fnv1a b2023498725c73df> */
    agent_id: string;
    /** <71 chars, fnv1a b657d6a1a61711ea> */
    message: string;
  } & Record<string, JsonValue>;
  /** <117 chars, fnv1a d90e96e7ee990f9a> */
  session_event_read: {
    /** <88 chars, fnv1a 37107d91ac2629f1> */
    session_id?: string;
    /** <29 chars, fnv1a be8dacfd0b9ed585> */
    seq: number;
    /** <57 chars, fnv1a 076a77b5378717d0> */
    before?: number;
    /** <55 chars, fnv1a 762ad931126eac92> */
    after?: number;
  } & Record<string, JsonValue>;
  /** <127 chars, fnv1a 96669d4f3236c648> */
  session_event_search: {
    /** <85 chars, fnv1a 75039dfbb405f972> */
    session_id?: string;
    /** <62 chars, fnv1a 3a37fbd6ffda3ee9> */
    query: string;
    /** <60 chars, fnv1a dc937446c644d4a0> */
    seq_from?: number;
    /** <59 chars, fnv1a 683a55492a3af60c> */
    seq_to?: number;
    /** <77 chars, fnv1a 760862b8590d734d> */
    time_from?: string;
    /** <78 chars, fnv1a d0dfd5664ca904a4> */
    time_to?: string;
    /** <33 chars, fnv1a 83a95ce524067e9e> */
    event_types?: string[];
    /** <134 chars, fnv1a 222d6fd7ef48033d> */
    surfaces?: ("current" | "shadowed" | "log-only")[];
  } & Record<string, JsonValue>;
  /** <207 chars, fnv1a 17c9c5d3a65e7a4e> */
  session_event_trace: {
    /** <88 chars, fnv1a 37107d91ac2629f1> */
    session_id?: string;
    /** <29 chars, fnv1a be8dacfd0b9ed585> */
    seq: number;
  } & Record<string, JsonValue>;
  /** <162 chars, fnv1a fbca628d83087d25> */
  session_search: {
    /** <62 chars, fnv1a 3a37fbd6ffda3ee9> */
    query: string;
    /** <29 chars, fnv1a 6cc4501cc69527e2> */
    session_ids?: string[];
    /** <81 chars, fnv1a 12071402b79f0c53> */
    created_at_from?: string;
    /** <82 chars, fnv1a c490fc40cc1f722e> */
    created_at_to?: string;
    /** <61 chars, fnv1a a1b64f2bde9cc284> */
    parent_session_ids?: string[];
    /** <116 chars, fnv1a 2c6fe27441fc4f2c> */
    include_root_sessions?: boolean;
    /** <119 chars, fnv1a deb1c2efeb3990cf> */
    availability?: ("live" | "persisted")[];
    /** <60 chars, fnv1a dc937446c644d4a0> */
    event_seq_from?: number;
    /** <59 chars, fnv1a 683a55492a3af60c> */
    event_seq_to?: number;
    /** <77 chars, fnv1a 760862b8590d734d> */
    event_time_from?: string;
    /** <78 chars, fnv1a d0dfd5664ca904a4> */
    event_time_to?: string;
    /** <33 chars, fnv1a 83a95ce524067e9e> */
    event_types?: string[];
    /** <134 chars, fnv1a 222d6fd7ef48033d> */
    event_surfaces?: ("current" | "shadowed" | "log-only")[];
  } & Record<string, JsonValue>;
  /** <209 chars, fnv1a fbf6ddd827a4e349> */
  session_trace: {
    /** <84 chars, fnv1a 53d359f9111c31ab> */
    session_id?: string;
  } & Record<string, JsonValue>;
  /** <181 chars, fnv1a 031f24fd20b6143c> */
  skill: {
    /** <50 chars, fnv1a 1a1691b858191476> */
    name: string;
  } & Record<string, JsonValue>;
  /** <658 chars, fnv1a 0d50ea8284639db4> */
  str_replace_editor: {
    /** <56 chars, fnv1a 14065cba4964b606> */
    command: "view" | "create" | "str_replace" | "insert";
    /** <75 chars, fnv1a bb5e8be239fddb70> */
    path: string;
    /** <59 chars, fnv1a 0c37677a941a9570> */
    file_text?: string;
    /** <92 chars, fnv1a 221025f24ecc7c33> */
    insert_line?: number;
    /** <117 chars, fnv1a 61b0d50313c3b91d> */
    new_str?: string;
    /** <66 chars, fnv1a cdf21004790b0a00> */
    old_str?: string;
    /** <180 chars, fnv1a df4433250bc88f48> */
    view_range?: number[];
  } & Record<string, JsonValue>;
  /** <591 chars, fnv1a 1d56a89979f2192e> */
  subagent: {
    /** <209 chars, fnv1a c81b3346da243467> */
    cwd?: string;
    /** <58 chars, fnv1a b37fc6816d47b1ce> */
    description: string;
    /** <115 chars, fnv1a baab7c58ab8dde53> */
    prompt: string;
    /** <119 chars, fnv1a df419dd281aa83e5> */
    run_in_background?: boolean;
  } & Record<string, JsonValue>;
  /** <505 chars, fnv1a 3bb81c34a7a012e0> */
  subagent_fork: {
    /** <209 chars, fnv1a c81b3346da243467> */
    cwd?: string;
    /** <58 chars, fnv1a b37fc6816d47b1ce> */
    description: string;
    /** <110 chars, fnv1a c587c40b7b16f222> */
    prompt: string;
    /** <111 chars, fnv1a 78766fea70beaea6> */
    run_in_background?: boolean;
  } & Record<string, JsonValue>;
  /** <842 chars, fnv1a 5e096d5f99cfe9d9> */
  todo_write: {
    /** <53 chars, fnv1a 4e737a1b24929cb5> */
    todos: ({
      /** <39 chars, fnv1a 8c7381d13836169f> */
      content: string;
      /** <61 chars, fnv1a 127561dec2390130> */
      status: "pending" | "in_progress" | "completed";
    })[];
  } & Record<string, JsonValue>;
  /** <27 chars, fnv1a 40db082fb91e28fc> */
  update_goal: {
    /** <44 chars, fnv1a 7bbd5cb00ce09928> */
    goal_id: string;
    /** <54 chars, fnv1a f06065ffaa01939f> */
    revision: number;
    /** <217 chars, fnv1a 00b3b357f5d436f7> */
    action: "edit" | "pause" | "resume" | "complete" | "blocked";
    /** <33 chars, fnv1a 9584994809e988d9> */
    objective?: string;
    /** <35 chars, fnv1a fcc897fefd56c899> */
    max_goal_rounds?: number;
    /** <124 chars, fnv1a e217504e55ef7c00> */
    blocked_reason?: string;
  } & Record<string, JsonValue>;
  /** <91 chars, fnv1a a08952f2346d783e> */
  web_fetch: {
    /** <25 chars, fnv1a 2798078b3b062174> */
    url: string;
  } & Record<string, JsonValue>;
  /** <129 chars, fnv1a d3883ef5f36e9701> */
  web_search: {
    /** <49 chars, fnv1a c95b3c22fad4304c> */
    queries: string[];
  } & Record<string, JsonValue>;
  /** <2364 chars, fnv1a 75307163a49fda26> */
  workflow: {
    /** <140 chars, fnv1a 3869780fb139a637> */
    script: string;
    /** <50 chars, fnv1a 357919361a0431c2> */
    meta: {
      /** <41 chars, fnv1a f799ba8e7f38ee04> */
      name: string;
      /** <39 chars, fnv1a 4a602dda510b6f5b> */
      description: string;
      /** <47 chars, fnv1a 08b035dd24c6d1cf> */
      whenToUse?: string;
      /** <51 chars, fnv1a 73802af1ed79f307> */
      phases?: ({
        /** <33 chars, fnv1a 33545fb7957673a9> */
        title: string;
        /** <35 chars, fnv1a c741521bb403066e> */
        detail?: string;
        /** <118 chars, fnv1a 1ff8c17dde0973b2> */
        provider?: string;
        /** <112 chars, fnv1a f0c8c0d3cb8ac1a8> */
        model?: string;
      } & Record<string, JsonValue>)[];
    } & Record<string, JsonValue>;
    /** <117 chars, fnv1a 2ec3e09209a65b82> */
    args?: Record<string, JsonValue>;
    /** <164 chars, fnv1a 32b8d24d13d4935a> */
    run_in_background?: boolean;
  } & Record<string, JsonValue>;
  /** <229 chars, fnv1a 096087872049570b> */
  working_directory: {
    /** <76 chars, fnv1a 47c9e25d92cd4f19> */
    cd?: string;
  } & Record<string, JsonValue>;
  /** <90 chars, fnv1a c6bdc05eec852571> */
  write: {
    /** <65 chars, fnv1a 0849ebc0dac3ba88> */
    file_path: string;
    /** <53 chars, fnv1a 0a5ca4123ad10436> */
    content: string;
    /** <153 chars, fnv1a ffb0ea9259751f11> */
    sandbox_permissions?: "workspace-write" | "danger-full-access";
    /** <108 chars, fnv1a c92f3201c68965f7> */
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
