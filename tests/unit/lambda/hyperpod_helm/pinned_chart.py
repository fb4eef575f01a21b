"""The HyperPod chart's Chart.yaml as the installer pins it, and the dependencies the cluster needs (shared by the
chart, commands and handler tests)."""

# The shape of helm_chart/HyperPodHelmChart/Chart.yaml at the pinned tag (v3.9.0): a flat list of maps, remote
# sub-charts from three hosts, the rest file:// (written here in that form; not the chart's own file).
PINNED_STYLE_CHART = """apiVersion: v2
name: hyperpod-helm-chart
# comment
version: 0.1.0
appVersion: "1.16.0"

dependencies:
  - name: cert-manager
    version: "v1.18.2"
    repository: oci://quay.io/jetstack/charts
    condition: cert-manager.enabled
  - name: training-operators
    version: "0.1.0"
    repository: "file://charts/training-operators"
    condition: trainingOperators.enabled
  - name: nvidia-device-plugin
    version: "0.16.1"
    repository: https://nvidia.github.io/k8s-device-plugin
    condition: nvidia-device-plugin.devicePlugin.enabled
  - name: aws-efa-k8s-device-plugin
    version: "0.5.20"
    repository: https://aws.github.io/eks-charts/
    condition: aws-efa-k8s-device-plugin.devicePlugin.enabled
  - name: health-monitoring-agent
    version: "0.1.0"
    repository: "file://charts/health-monitoring-agent"
    condition: health-monitoring-agent.enabled
  - name: mlflow
    version: "0.1.0"
    repository: "file://charts/mlflow"
    condition: mlflow.enabled
"""
# The repositories the deployment pins for the remote sub-charts (the installer takes them from here, never from the
# downloaded Chart.yaml).
PINNED_REPOSITORIES = {
    "nvidia-device-plugin": "https://nvidia.github.io/k8s-device-plugin",
    "aws-efa-k8s-device-plugin": "https://aws.github.io/eks-charts",
    "cert-manager": "oci://quay.io/jetstack/charts",
}
REQUIRED = ["aws-efa-k8s-device-plugin", "health-monitoring-agent", "nvidia-device-plugin", "training-operators"]
