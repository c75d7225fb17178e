#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The cluster examples, checked offline (no cluster, no container engine on
# CI): the manifests parse as Kubernetes objects of known kinds (Debian's
# kubectl, `label --local`, which needs no API server), and hold together:
# selectors match, every mount has its volume, the MPS container runs the
# multi-user server, ferryd's socket is the one its probe and the example pod
# use, the pod has ferryd's group, the image tag is this version, the CUDA
# container runs the image with the CUDA backend (Containerfile.cuda) and the
# driver's compute libraries, an init container gives the hostPath socket
# directory to ferryd's uid; the Containerfile installs the packages
# scripts/deb-build.sh makes and fixes the uid the manifests name.
#   bash tests/deploy_check.sh SOURCE_DIR
set -euo pipefail
src=${1:-$(cd "$(dirname "$0")/.." && pwd)}
manifest=$src/deploy/kubernetes/ferryd-daemonset.yaml
containerfile=$src/deploy/container/Containerfile
fail() { echo "deploy_check: FAIL: $*" >&2; exit 1; }

if command -v kubectl >/dev/null; then
  kinds=$(kubectl label --local -f "$manifest" deploy-check=offline -o name 2>&1) || fail "kubectl: $kinds"
  [[ $kinds == *daemonset.apps/ferryd* && $kinds == *pod/ferry-client-example* ]] || fail "kubectl read: $kinds"
  echo "kubectl reads: $(echo $kinds)"
else
  echo "deploy_check: no kubectl (Debian's kubernetes-client): the structural checks only"
fi

/usr/bin/python3 - "$manifest" "$containerfile" "$(cat "$src/VERSION")" "$src/deploy/container/build-cuda-ferryd.sh" <<'PY'
import re, sys, yaml

manifest, containerfile, version = sys.argv[1:4]
docs = [d for d in yaml.safe_load_all(open(manifest)) if d]
def fail(msg):
    sys.exit("deploy_check: FAIL: " + msg)
by_kind = {}
for d in docs:
    for key in ("apiVersion", "kind", "metadata"):
        if key not in d:
            fail(f"a document without {key}: {d}")
    by_kind.setdefault(d["kind"], []).append(d)
ds = by_kind["DaemonSet"][0]
pod = by_kind["Pod"][0]
if ds["spec"]["selector"]["matchLabels"].items() - ds["spec"]["template"]["metadata"]["labels"].items():
    fail("the DaemonSet's selector does not match its template's labels")

def check_mounts(spec, what):
    vols = {v["name"]: v for v in spec.get("volumes", [])}
    for c in spec["containers"] + spec.get("initContainers", []):
        for m in c.get("volumeMounts", []):
            if m["name"] not in vols:
                fail(f"{what}: container {c['name']} mounts {m['name']}, which no volume defines")
    return vols

tpl = ds["spec"]["template"]["spec"]
vols = check_mounts(tpl, "DaemonSet")
pvols = check_mounts(pod["spec"], "Pod")
for name in ("sockets", "mps"):
    if vols[name]["hostPath"]["path"] != pvols[name]["hostPath"]["path"]:
        fail(f"the pod's {name} volume is not the DaemonSet's host directory")
if vols["sockets"]["hostPath"]["path"] != "/run/ferry":
    fail("the socket directory is not /run/ferry")
cs = {c["name"]: c for c in tpl["containers"]}
mps = " ".join(cs["mps"]["command"])
if "nvidia-cuda-mps-control" not in mps or " -M" not in mps:
    fail(f"the MPS container does not run the multi-user server (-M): {mps}")
args = cs["ferryd"]["args"]
sock = args[args.index("--socket") + 1]
probe = cs["ferryd"]["readinessProbe"]["exec"]["command"]
if sock not in probe or not sock.startswith("/run/ferry/"):
    fail(f"ferryd's socket {sock} is not the probe's ({probe}) or not under /run/ferry")
env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
if env.get("FERRY_SOCKET") != sock:
    fail(f"the example pod's FERRY_SOCKET {env.get('FERRY_SOCKET')} is not ferryd's {sock}")
mps_env = {e["name"]: e["value"] for e in cs["mps"]["env"]}
ferryd_env = {e["name"]: e["value"] for e in cs["ferryd"]["env"]}
if not (mps_env["CUDA_MPS_PIPE_DIRECTORY"] == ferryd_env["CUDA_MPS_PIPE_DIRECTORY"] == env["CUDA_MPS_PIPE_DIRECTORY"]):
    fail("the MPS pipe directory differs between the MPS server, ferryd and the pod")
gid = tpl["securityContext"]["runAsGroup"]
if gid not in pod["spec"]["securityContext"].get("supplementalGroups", []):
    fail(f"the example pod is not in ferryd's group {gid}: it could not connect")
# The packages' ferryd has no CUDA backend: a container that asks for it
# runs the image of Containerfile.cuda, which rebuilds ferryd with it.
for c in tpl["containers"] + tpl.get("initContainers", []):
    cuda = "cuda" in c.get("args", []) and "--backend" in c.get("args", [])
    want = f"ferryd-cuda:{version}" if cuda else f"ferryd:{version}"
    if c["image"] != want:
        fail(f"container {c['name']} runs {c['image']}, not {want}")
    if cuda:
        caps = {e["name"]: e["value"] for e in c.get("env", [])}.get("NVIDIA_DRIVER_CAPABILITIES", "")
        if "compute" not in caps:
            fail(f"container {c['name']} uses CUDA without NVIDIA_DRIVER_CAPABILITIES compute (no libcuda.so.1)")
cuda_text = open(containerfile + ".cuda").read()
if "FERRY_CUDA" not in open(sys.argv[4]).read() or "build-cuda-ferryd.sh" not in cuda_text:
    fail("Containerfile.cuda does not build ferryd with the CUDA backend (build-cuda-ferryd.sh, -DFERRY_CUDA=ON)")
if f"ARG BASE=ferryd:{version}" not in cuda_text:
    fail(f"Containerfile.cuda does not start from ferryd:{version}")
# hostPath creates /run/ferry as root's: an init container gives it to the
# uid ferryd runs as before ferryd makes its socket there.
inits = tpl.get("initContainers", [])
owner = f"chown {tpl['securityContext']['runAsUser']}:{tpl['securityContext']['runAsGroup']} /run/ferry"
if not any(owner in " ".join(i.get("command", [])) and any(m["name"] == "sockets" for m in i.get("volumeMounts", []))
           for i in inits):
    fail(f"no init container runs '{owner}' on the sockets volume: ferryd could not make its socket")
text = open(containerfile).read()
if not re.search(r"^FROM debian:bookworm", text, re.M):
    fail("the Containerfile does not start from Debian bookworm")
if "ferryd_*.deb" not in text or "libferry0_*.deb" not in text:
    fail("the Containerfile does not install the ferryd and libferry0 packages")
uid = re.search(r"^ARG FERRY_UID=(\d+)", text, re.M)
if not uid or int(uid.group(1)) != tpl["securityContext"]["runAsUser"] or int(uid.group(1)) != gid:
    fail("the Containerfile's FERRY_UID is not the uid and gid the DaemonSet runs as")
print(f"deploy_check: ok ({len(docs)} objects; untested on a cluster)")
PY
