"""Generated stubs for kubelet's pod-resources API ``v1`` (do not edit).

``api.proto`` is a copy of k8s.io/kubelet's ``pkg/apis/podresources/v1/api.proto``;
``api_pb2*.py`` come from grpcio-tools. Regenerate all of them with
``tests/tools/gen_deviceplugin_api.sh`` (it makes the device plugin stubs too).
"""
