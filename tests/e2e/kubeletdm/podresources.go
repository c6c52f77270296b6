package main

// kubelet's pod-resources API (v1 PodResourcesLister) for the fake node: kubelet's own
// server (k8s.io/kubernetes/pkg/kubelet/apis/podresources) over the harness's device
// manager, so tests and the agent read what kubelet says each container holds, the same
// way dcgm-exporter and headroom's agent do on a real node. The providers are the
// adapters kubelet's container manager has (devices from the device manager, pods from the
// pod source); CPUs, memory and DRA are empty: this node has no CPU/memory manager or DRA.

import (
	"context"
	"net"
	"os"
	"time"

	"google.golang.org/grpc"
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/kubernetes/pkg/kubelet/apis/podresources"
	"k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"
)

type devicesProvider struct{ dm *devicemanager.ManagerImpl }

func (d devicesProvider) UpdateAllocatedDevices(logger klog.Logger) {
	d.dm.UpdateAllocatedDevices(logger)
}

func (d devicesProvider) GetDevices(podUID, containerName string) []*podresourcesapi.ContainerDevices {
	return containerDevices(d.dm.GetDevices(podUID, containerName))
}

func (d devicesProvider) GetAllocatableDevices(logger klog.Logger) []*podresourcesapi.ContainerDevices {
	return containerDevices(d.dm.GetAllocatableDevices(logger))
}

// containerDevices is kubelet's containerDevicesFromResourceDeviceInstances (pkg/kubelet/cm,
// unexported) for plugins that report no topology, as headroom's does not.
func containerDevices(devs devicemanager.ResourceDeviceInstances) []*podresourcesapi.ContainerDevices {
	var out []*podresourcesapi.ContainerDevices
	for resource, ids := range devs {
		for id := range ids {
			out = append(out, &podresourcesapi.ContainerDevices{ResourceName: resource, DeviceIds: []string{id}})
		}
	}
	return out
}

type podsProvider struct {
	active func() []*v1.Pod
	all    func() []*v1.Pod
}

func (p podsProvider) GetActivePods() []*v1.Pod { return p.active() }
func (p podsProvider) GetPods() []*v1.Pod       { return p.all() }
func (p podsProvider) GetPodByName(namespace, name string) (*v1.Pod, bool) {
	for _, pod := range p.all() {
		if pod.Namespace == namespace && pod.Name == name {
			return pod, true
		}
	}
	return nil, false
}

type noCPUs struct{}

func (noCPUs) GetCPUs(*v1.Pod, *v1.Container) []int64 { return nil }
func (noCPUs) GetPodCPUs(string) []int64              { return nil }
func (noCPUs) GetAllocatableCPUs() []int64            { return nil }

type noMemory struct{}

func (noMemory) GetMemory(klog.Logger, *v1.Pod, *v1.Container) []*podresourcesapi.ContainerMemory {
	return nil
}
func (noMemory) GetPodMemory(klog.Logger, string) []*podresourcesapi.ContainerMemory { return nil }
func (noMemory) GetAllocatableMemory(klog.Logger) []*podresourcesapi.ContainerMemory {
	return nil
}

type noDRA struct{}

func (noDRA) GetDynamicResources(klog.Logger, *v1.Pod, *v1.Container) []*podresourcesapi.DynamicResource {
	return nil
}

// servePodResources serves kubelet's v1 pod-resources server on a unix socket until ctx ends.
func servePodResources(ctx context.Context, socket string, providers podresources.PodResourcesProviders) (*grpc.Server, error) {
	_ = os.Remove(socket)
	ln, err := net.Listen("unix", socket)
	if err != nil {
		return nil, err
	}
	srv := grpc.NewServer()
	podresourcesapi.RegisterPodResourcesListerServer(srv, podresources.NewV1PodResourcesServer(ctx, providers))
	go func() { _ = srv.Serve(ln) }()
	return srv, nil
}

// podResourcesOf asks the pod-resources socket, as a client would, which devices each
// container of the pod holds: resource -> device ids, per container name.
func podResourcesOf(socket, namespace, name string) (map[string]map[string][]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	client, conn, err := podresources.GetV1Client(ctx, "unix://"+socket, 5*time.Second, 16*1024*1024)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	resp, err := client.Get(ctx, &podresourcesapi.GetPodResourcesRequest{PodName: name, PodNamespace: namespace})
	if err != nil {
		return nil, err
	}
	out := map[string]map[string][]string{}
	for _, c := range resp.GetPodResources().GetContainers() {
		m := map[string][]string{}
		for _, d := range c.GetDevices() {
			m[d.GetResourceName()] = append(m[d.GetResourceName()], d.GetDeviceIds()...)
		}
		out[c.GetName()] = m
	}
	return out, nil
}
