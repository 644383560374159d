"""The same sweep on a cluster: `distillery submit` through the Ray Jobs API, and the KubeRay
RayJob (and the model-cache Job) rendered from k8s/ for `distillery submit --k8s`.
"""
