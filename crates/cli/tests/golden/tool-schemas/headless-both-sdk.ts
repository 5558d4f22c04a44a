interface ToolArgsMap {
  /** <1711 chars, fnv1a e3fec2b4e9fec87b> */
  bash: <583 chars, fnv1a a0838bb31f93c882>
  /** <274 chars, fnv1a 50d4d9cd8dc1b70e> */
  create_goal: <179 chars, fnv1a f34900d4198790b9>
  /** <102 chars, fnv1a cbfa8362b8cf5dd8> */
  edit: <506 chars, fnv1a aa5e486814ae89dc>
  /** <351 chars, fnv1a e3adff61628719f7> */
  exit_plan_mode: <98 chars, fnv1a 91cf42096ae5893f>
  /** <97 chars, fnv1a 6ac3fad25cc89eed> */
  forget: <96 chars, fnv1a a1910a85bd0d44ed>
  /** <75 chars, fnv1a 6ce8ddde4969417b> */
  get_goal: <26 chars, fnv1a 8d25499d1433881b>
  /** <364 chars, fnv1a 691635b6c9bf63ad> */
  glob: <167 chars, fnv1a ab366c54190f5ecb>
  /** <244 chars, fnv1a 38e94ed0f6c5ae07> */
  grep: <235 chars, fnv1a 21a98e9ff389f98e>
  /** <151 chars, fnv1a 592b73ae1c450ada> */
  interrupt_agent: <102 chars, fnv1a 3cb3809a7fecf91a>
  /** <114 chars, fnv1a abeec301868e7bfb> */
  job_kill: <167 chars, fnv1a d2a90a83226c1023>
  /** <87 chars, fnv1a 74e25877426b3fd0> */
  job_list: <26 chars, fnv1a 8d25499d1433881b>
  /** <303 chars, fnv1a 234e266e63b66be5> */
  job_output: <239 chars, fnv1a 528db25b71319b2b>
  /** <493 chars, fnv1a 04cf43a1f9ec307e> */
  list_agents: <120 chars, fnv1a c436df0e9c1f397f>
  /** <589 chars, fnv1a ffc38b904ab44077> */
  ralph: <173 chars, fnv1a 0eb1adfa37c932fa>
  /** <69 chars, fnv1a ef2fb08b1df9e9d0> */
  read: <236 chars, fnv1a 7111da44d6f60dee>
  /** <374 chars, fnv1a aa658434f120c910> */
  read_image: <103 chars, fnv1a 521c5b62bb4b9fc5>
  /** <262 chars, fnv1a 0f2a001663bd13f6> */
  recall: <324 chars, fnv1a 24102883da3d7e74>
  /** <215 chars, fnv1a 5fe98f2d09abb6d9> */
  remember: <245 chars, fnv1a 49556dc01302fe40>
  /** <196 chars, fnv1a b5f0f7c161944d09> */
  send_message: <169 chars, fnv1a 57800eeb583951ce>
  /** <117 chars, fnv1a d90e96e7ee990f9a> */
  session_event_read: <301 chars, fnv1a 4f9f6482c457149e>
  /** <127 chars, fnv1a 96669d4f3236c648> */
  session_event_search: <621 chars, fnv1a 5db55255e5583ab5>
  /** <207 chars, fnv1a 17c9c5d3a65e7a4e> */
  session_event_trace: <168 chars, fnv1a b5203e3b9ad213bf>
  /** <162 chars, fnv1a fbca628d83087d25> */
  session_search: <1061 chars, fnv1a 144c1ed451f1739b>
  /** <209 chars, fnv1a fbf6ddd827a4e349> */
  session_trace: <105 chars, fnv1a da954827f5aa19e6>
  /** <181 chars, fnv1a 031f24fd20b6143c> */
  skill: <98 chars, fnv1a 16180230ed0594b0>
  /** <658 chars, fnv1a 0d50ea8284639db4> */
  str_replace_editor: <556 chars, fnv1a 952584b34032f1f2>
  /** <591 chars, fnv1a 1d56a89979f2192e> */
  subagent: <317 chars, fnv1a 9089f739bf43fa4a>
  /** <505 chars, fnv1a 3bb81c34a7a012e0> */
  subagent_fork: <317 chars, fnv1a 33900d5bfbfef2f1>
  /** <842 chars, fnv1a 5e096d5f99cfe9d9> */
  todo_write: <278 chars, fnv1a 76585d487858cc12>
  /** <27 chars, fnv1a 40db082fb91e28fc> */
  update_goal: <504 chars, fnv1a 4f91b1d4d31001cb>
  /** <91 chars, fnv1a a08952f2346d783e> */
  web_fetch: <97 chars, fnv1a ddcc248e4e450c78>
  /** <129 chars, fnv1a d3883ef5f36e9701> */
  web_search: <103 chars, fnv1a 35348038adb17aad>
  /** <2364 chars, fnv1a 75307163a49fda26> */
  workflow: <983 chars, fnv1a d0fb28ea140581d4>
  /** <229 chars, fnv1a 096087872049570b> */
  working_directory: <97 chars, fnv1a d66fa3e8858acb4e>
  /** <90 chars, fnv1a c6bdc05eec852571> */
  write: <360 chars, fnv1a 4c5bf05d9bd61b0b>
}

interface ToolOutputMap {
  bash: <515 chars, fnv1a 2a967c69b6e8eb98>
  create_goal: <351 chars, fnv1a f31759891c0466e0>
  edit: <63 chars, fnv1a 6f8e0145beb3429c>
  exit_plan_mode: <10 chars, fnv1a 760a25c81b1b4d01>
  forget: <10 chars, fnv1a 760a25c81b1b4d01>
  get_goal: <351 chars, fnv1a f31759891c0466e0>
  glob: <45 chars, fnv1a 6f05be5d2924c460>
  grep: <96 chars, fnv1a f93d395f87b8b270>
  interrupt_agent: <29 chars, fnv1a fea743a62bff2780>
  job_kill: <292 chars, fnv1a 57ddc3ddb83c1142>
  job_list: <204 chars, fnv1a 13bf7fed1f4440b3>
  job_output: <250 chars, fnv1a 9bd7606586a6d975>
  list_agents: <291 chars, fnv1a b096435fa1108392>
  ralph: <76 chars, fnv1a f4d22724426100fb>
  read: <132 chars, fnv1a 34f465394dbdc14f>
  read_image: <316 chars, fnv1a 8741825f101210b4>
  recall: <10 chars, fnv1a 760a25c81b1b4d01>
  remember: <10 chars, fnv1a 760a25c81b1b4d01>
  send_message: <29 chars, fnv1a 3a1b2a54eb0d1ba0>
  session_event_read: <10 chars, fnv1a 760a25c81b1b4d01>
  session_event_search: <10 chars, fnv1a 760a25c81b1b4d01>
  session_event_trace: <10 chars, fnv1a 760a25c81b1b4d01>
  session_search: <10 chars, fnv1a 760a25c81b1b4d01>
  session_trace: <10 chars, fnv1a 760a25c81b1b4d01>
  skill: <247 chars, fnv1a 956fe312b72dbe22>
  str_replace_editor: <7 chars, fnv1a 80eb73b1f909dc39>
  subagent: <182 chars, fnv1a a56eea3fdee8f1c1>
  subagent_fork: <182 chars, fnv1a a56eea3fdee8f1c1>
  todo_write: <203 chars, fnv1a 67b1663d9148cf31>
  update_goal: <351 chars, fnv1a f31759891c0466e0>
  web_fetch: <186 chars, fnv1a 9b431e27cf17a264>
  web_search: <169 chars, fnv1a c677f04290d8caca>
  workflow: <75 chars, fnv1a 0726201870bc0932>
  working_directory: <10 chars, fnv1a 760a25c81b1b4d01>
  write: <106 chars, fnv1a 49b3a7cfcfc09bd6>
}
