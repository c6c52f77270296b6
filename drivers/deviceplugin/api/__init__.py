"""Generated stubs for kubelet's device plugin API ``v1beta1`` (do not edit).

``api.proto`` is a copy of k8s.io/kubelet's ``pkg/apis/deviceplugin/v1beta1/api.proto``;
``api_pb2*.py`` come from grpcio-tools. Regenerate all of them with
``tests/tools/gen_deviceplugin_api.sh`` (docs/device-plugin.md says when).
"""
