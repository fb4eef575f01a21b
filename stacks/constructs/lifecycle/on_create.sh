#!/bin/bash
# HyperPod (EKS orchestrator) lifecycle script: runs once on every new node, as root, before it joins.
# Shipped as a versioned CDK asset; it fetches nothing from the network. A non-zero exit fails the node,
# and HyperPod replaces it, so every step is idempotent and failures are logged with their step name.
set -euo pipefail

LOG_DIR=/var/log/provision
LOG_FILE="${LOG_DIR}/provisioning.log"
mkdir -p "${LOG_DIR}"
exec > >(tee -a "${LOG_FILE}") 2>&1

STEP="start"
log() { echo "[$(date -u +%Y-%m-%dT%H:%M:%SZ)] [mtrl on_create] $*"; }
trap 'rc=$?; if [ "${rc}" -ne 0 ]; then log "FAILED in step ${STEP} (exit ${rc})"; fi; exit "${rc}"' EXIT

log "node $(hostname) starting lifecycle configuration"

# 1. Container storage on the instance group's EBS volume (mounted at /opt/sagemaker), so large training
#    images do not fill the small root volume.
STEP="containerd-data-root"
CONTAINERD_CONFIG=/etc/eks/containerd/containerd-config.toml
if mountpoint -q /opt/sagemaker; then
  mkdir -p /opt/sagemaker/containerd/data-root
  if [ -f "${CONTAINERD_CONFIG}" ]; then
    if grep -qE '^[#[:space:]]*root[[:space:]]*=' "${CONTAINERD_CONFIG}"; then
      sed -i -E 's@^[#[:space:]]*root[[:space:]]*=.*@root = "/opt/sagemaker/containerd/data-root"@' "${CONTAINERD_CONFIG}"
    else
      sed -i '1i root = "/opt/sagemaker/containerd/data-root"' "${CONTAINERD_CONFIG}"
    fi
    log "containerd data root -> /opt/sagemaker/containerd/data-root"
  else
    log "no ${CONTAINERD_CONFIG}; leaving the containerd data root unchanged"
  fi
else
  log "/opt/sagemaker is not a mount point; keeping container storage on the root volume"
fi

# 2. Kernel limits for many pods and data loaders per node (inotify watches, mmap counts, open files).
STEP="sysctl"
cat > /etc/sysctl.d/99-mtrl.conf <<'SYSCTL'
fs.inotify.max_user_instances = 8192
fs.inotify.max_user_watches = 1048576
vm.max_map_count = 1048576
fs.file-max = 2097152
SYSCTL
sysctl --system > /dev/null
log "kernel limits applied"

# 3. Keep journald bounded so long runs cannot fill the root volume with logs.
STEP="journald"
mkdir -p /etc/systemd/journald.conf.d
cat > /etc/systemd/journald.conf.d/99-mtrl.conf <<'JOURNALD'
[Journal]
SystemMaxUse=2G
JOURNALD
if systemctl is-active --quiet systemd-journald; then
  systemctl restart systemd-journald
fi

STEP="done"
log "lifecycle configuration complete"
