"""The grading group's Localhost seccomp profile: your container runtime's default
profile (what `RuntimeDefault` is on your nodes) plus exactly the calls distillery's
jail makes (workers/sandbox/launcher.py), allowed without CAP_SYS_ADMIN:

    unshare   new user, mount, PID, network, IPC and UTS namespaces
    mount     a private mount tree, a tmpfs root, read-only binds into it
    umount2   (the jail's clean-up of its own tree)
    chroot    into that root

Everything else keeps the default's rule (clone with namespace flags, setns, bpf,
keyctl, ptrace, perf_event_open, ... stay refused to a process without the matching
capability, which no distillery pod has). Inside the jail, graded code additionally
runs under the jail's own seccomp filter.

    python k8s/security/seccomp_profile.py DEFAULT.json > distillery-sandbox.json
    python k8s/security/seccomp_profile.py DEFAULT.json --operator distillery > sp.yaml

DEFAULT.json: the runtime's default profile (Docker/moby's profiles/seccomp/default.json
is containerd's and CRI-O's too). The first form writes the file to install on every
node of the grading group as /var/lib/kubelet/seccomp/operator/distillery/
distillery-sandbox.json (the path the Security Profiles Operator uses, which the
RayCluster names); the second writes the operator's SeccompProfile object, which
installs it there on every node (`kubectl apply -f sp.yaml`). No third-party text is
copied into this repository: the profile is made from the file you give it.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from typing import Any

JAIL_SYSCALLS = ("chroot", "mount", "umount2", "unshare")
PROFILE_NAME = "distillery-sandbox"


def sandbox_profile(default: dict[str, Any]) -> dict[str, Any]:
    """`default` plus one unconditional ALLOW rule for the jail's calls. Rules of the
    default that already allow them (behind a capability) are left as they are."""
    if default.get("defaultAction") not in (
        "SCMP_ACT_ERRNO",
        "SCMP_ACT_KILL",
        "SCMP_ACT_KILL_PROCESS",
    ):
        raise ValueError(
            f"not a deny-by-default profile (defaultAction {default.get('defaultAction')!r})"
        )
    profile = copy.deepcopy(default)
    profile.setdefault("syscalls", []).append(
        {
            "names": list(JAIL_SYSCALLS),
            "action": "SCMP_ACT_ALLOW",
            "comment": "distillery's jail (workers/sandbox/launcher.py), without CAP_SYS_ADMIN",
        }
    )
    return profile


# A distillery pod has no capability (drop: [ALL]) and runs on these architectures.
POD_ARCHES = {"amd64", "arm64", "x86", "x32", "arm"}


def applies_to_pods(rule: dict[str, Any]) -> bool:
    """Whether a conditional rule of the default applies to a distillery pod (the
    operator's objects have no conditions): one that needs a capability does not, one
    that excludes a capability does; one for other architectures does not."""
    includes, excludes = rule.get("includes") or {}, rule.get("excludes") or {}
    if includes.get("caps"):
        return False
    arches = set(includes.get("arches") or POD_ARCHES)
    return bool(arches & POD_ARCHES - set(excludes.get("arches") or ()))


def operator_object(profile: dict[str, Any], namespace: str) -> dict[str, Any]:
    """The Security Profiles Operator's SeccompProfile (v1beta1) for `profile`."""
    spec: dict[str, Any] = {"defaultAction": profile["defaultAction"]}
    arches = [a["architecture"] for a in profile.get("archMap", [])] or profile.get(
        "architectures", []
    )
    if arches:
        spec["architectures"] = arches
    syscalls = []
    for rule in profile.get("syscalls", []):
        if not applies_to_pods(rule):
            continue
        entry = {"action": rule["action"], "names": rule["names"]}
        if "errnoRet" in rule:
            entry["errnoRet"] = rule["errnoRet"]
        if "args" in rule:
            entry["args"] = rule["args"]
        syscalls.append(entry)
    spec["syscalls"] = syscalls
    return {
        "apiVersion": "security-profiles-operator.x-k8s.io/v1beta1",
        "kind": "SeccompProfile",
        "metadata": {"name": PROFILE_NAME, "namespace": namespace},
        "spec": spec,
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("default", help="the container runtime's default seccomp profile (JSON)")
    parser.add_argument("--operator", metavar="NAMESPACE", help="write a SeccompProfile object")
    args = parser.parse_args(argv)
    with open(args.default) as f:
        profile = sandbox_profile(json.load(f))
    if args.operator:
        import yaml

        yaml.safe_dump(operator_object(profile, args.operator), sys.stdout, sort_keys=False)
    else:
        json.dump(profile, sys.stdout, indent=2)
        sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
