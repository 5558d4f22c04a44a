"""Drives `dsh --profile sdk` through upstream's published Python SDK (deepseek-harness-sdk),
exactly as its users do: DeepSeekHarness(dsh_bin=..., dsh_home=...). Used by
crates/cli/tests/all/sdk.rs.

    python run.py <scenario> <dsh binary> <dsh home> <cwd> <base url>

Also used by crates/cli/tests/all/team.rs (scenario `team`, through a team gateway).

Prints one JSON object describing what the SDK returned.
"""
import json
import sys

from deepseek_harness import DeepSeekHarness

scenario, dsh_bin, dsh_home, cwd, base_url = sys.argv[1:6]


def harness():
    return DeepSeekHarness(
        dsh_bin=dsh_bin,
        dsh_home=dsh_home,
        cwd=cwd,
        base_url=base_url,
        api_key="sk-test",
        initialize_timeout_seconds=30.0,
        request_timeout_seconds=60.0,
    )


def summary(result):
    return {
        "session_id": result.session_id,
        "final_response": result.final_response,
        "finish_reason": result.finish_reason,
        "event_types": [e.get("type") for e in result.events],
        "seqs": [e.get("seq") for e in result.events],
        "tool_results": [
            e["data"]["message"] for e in result.events if e.get("type") == "tool/result"
        ],
        "statuses": [
            n.payload.get("status") for n in result.notifications if n.method == "session.status"
        ],
    }


out = {}
if scenario == "turns":
    with harness() as h:
        session = h.start_session("sdk-turns")
        out["first"] = summary(session.run("first question"))
        out["second"] = summary(session.run("second question"))
        out["cwd"] = session.get_working_directory()
        out["moved"] = session.set_working_directory("sub")
        out["after"] = session.get_working_directory()
        out["third"] = summary(session.run("where are you now?"))
        try:
            session.set_working_directory("does-not-exist")
            out["bad_cwd"] = None
        except Exception as e:  # the SDK raises the runtime's error
            out["bad_cwd"] = str(e)
elif scenario == "resume":
    with harness() as h:
        session = h.resume_session("sdk-turns")
        out["resumed"] = summary(session.run("after the restart"))
        try:
            h.resume_session("no-such-session")
            out["missing"] = None
        except Exception as e:
            out["missing"] = str(e)
elif scenario == "team":
    # DSH_GATEWAY and DSH_GATEWAY_TOKEN, inherited from the environment, point the runtime
    # at a team gateway: the team's workers run the turns.
    # The working directory is the workers': read it, move the session, and run there.
    with harness() as h:
        session = h.resume_session("sdk-team")
        out["cwd"] = session.get_working_directory()
        out["moved"] = session.set_working_directory("sub")
        out["resumed"] = summary(session.run("second question"))
        out["after"] = session.get_working_directory()
        out["fresh"] = summary(h.start_session("sdk-team-fresh").run("third question"))
        try:
            h.resume_session("no-such-session")
            out["missing"] = None
        except Exception as e:
            out["missing"] = str(e)
else:
    raise SystemExit(f"unknown scenario {scenario}")
print(json.dumps(out))
