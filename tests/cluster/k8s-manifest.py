#!/usr/bin/env python3
"""k8s-manifest.py FILE: what the k8s-* cluster scenarios take from a manifest
of docs/kubernetes.md (extracted by mn_doc_block), printed as bash
assignments for `eval`:

  Service       svc_name svc_cluster_ip svc_publish svc_selector (KEY=VALUE)
  Job           job_name job_mode job_completions job_parallelism job_backoff
  JobSet        js_name js_subdomain js_max_restarts rjob_name rjob_replicas
                and the Job's fields as above
  PyTorchJob    pt_name pt_nproc master_replicas worker_replicas
  MPIJob        mpi_name mpi_slots mpi_launcher_as_worker mpi_launcher_policy
                launcher_replicas worker_replicas

and for each pod template, with a prefix (pod_, master_, worker_, launcher_):
PREFIX_command (an array: the container's command and args), PREFIX_env (an
array of NAME=VALUE; a value from a Secret is @secret:SECRET/KEY),
PREFIX_ports (container ports), PREFIX_user, PREFIX_group, PREFIX_nonroot,
PREFIX_readonly, PREFIX_no_escalation, PREFIX_caps_drop, PREFIX_restart,
PREFIX_subdomain, PREFIX_readiness_port.

Needs PyYAML (Debian's python3-yaml)."""

import shlex
import sys

import yaml


def out(name, value):
    if isinstance(value, list):
        print(f"{name}=({' '.join(shlex.quote(str(v)) for v in value)})")
    else:
        print(f"{name}={shlex.quote('' if value is None else str(value))}")


def env_value(var):
    if "value" in var:
        return str(var["value"])
    ref = var.get("valueFrom", {}).get("secretKeyRef")
    if ref:
        return f"@secret:{ref['name']}/{ref['key']}"
    return "@unsupported"


def pod(prefix, template, restart=None):
    spec = template["spec"]
    (container,) = spec["containers"][:1]
    psec = spec.get("securityContext", {})
    csec = container.get("securityContext", {})
    out(f"{prefix}_command", list(container.get("command", [])) + list(container.get("args", [])))
    out(f"{prefix}_env", [f"{v['name']}={env_value(v)}" for v in container.get("env", [])])
    out(f"{prefix}_ports", [p["containerPort"] for p in container.get("ports", [])])
    out(f"{prefix}_user", csec.get("runAsUser", psec.get("runAsUser")))
    out(f"{prefix}_group", csec.get("runAsGroup", psec.get("runAsGroup")))
    out(f"{prefix}_nonroot", csec.get("runAsNonRoot", psec.get("runAsNonRoot")))
    out(f"{prefix}_readonly", csec.get("readOnlyRootFilesystem"))
    out(f"{prefix}_no_escalation", csec.get("allowPrivilegeEscalation") is False)
    out(f"{prefix}_caps_drop", csec.get("capabilities", {}).get("drop", []))
    out(f"{prefix}_restart", restart or spec.get("restartPolicy"))
    out(f"{prefix}_subdomain", spec.get("subdomain"))
    probe = container.get("readinessProbe", {}).get("tcpSocket", {})
    out(f"{prefix}_readiness_port", probe.get("port"))


def job(spec):
    out("job_mode", spec.get("completionMode"))
    out("job_completions", spec.get("completions"))
    out("job_parallelism", spec.get("parallelism"))
    out("job_backoff", spec.get("backoffLimit"))
    pod("pod", spec["template"])


def main(path):
    with open(path, encoding="utf-8") as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    for doc in docs:
        kind, meta, spec = doc["kind"], doc["metadata"], doc["spec"]
        if kind == "Service":
            out("svc_name", meta["name"])
            out("svc_cluster_ip", spec.get("clusterIP"))
            out("svc_publish", spec.get("publishNotReadyAddresses"))
            out("svc_selector", [f"{k}={v}" for k, v in spec.get("selector", {}).items()])
        elif kind == "Job":
            out("job_name", meta["name"])
            job(spec)
        elif kind == "JobSet":
            out("js_name", meta["name"])
            out("js_subdomain", spec.get("network", {}).get("subdomain", meta["name"]))
            out("js_max_restarts", spec.get("failurePolicy", {}).get("maxRestarts"))
            (rjob,) = spec["replicatedJobs"]
            out("rjob_name", rjob["name"])
            out("rjob_replicas", rjob.get("replicas", 1))
            job(rjob["template"]["spec"])
        elif kind == "PyTorchJob":
            out("pt_name", meta["name"])
            out("pt_nproc", spec.get("nprocPerNode"))
            for rtype, replica in spec["pytorchReplicaSpecs"].items():
                prefix = rtype.lower()
                out(f"{prefix}_replicas", replica.get("replicas", 1))
                pod(prefix, replica["template"], replica.get("restartPolicy"))
        elif kind == "MPIJob":
            out("mpi_name", meta["name"])
            out("mpi_slots", spec.get("slotsPerWorker", 1))
            out("mpi_launcher_as_worker", spec.get("runLauncherAsWorker", False))
            out("mpi_launcher_policy", spec.get("launcherCreationPolicy", "AtStartup"))
            for rtype, replica in spec["mpiReplicaSpecs"].items():
                prefix = rtype.lower()
                out(f"{prefix}_replicas", replica.get("replicas", 1))
                pod(prefix, replica["template"], replica.get("restartPolicy"))
        else:
            sys.exit(f"k8s-manifest.py: unexpected kind {kind}")


if __name__ == "__main__":
    main(sys.argv[1])
