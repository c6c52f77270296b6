// Command kubeletdm runs kubelet's own device manager for one fake node, with no kubelet.
//
// Why: a device plugin is only proven by the code that calls it. This harness wires
// k8s.io/kubernetes/pkg/kubelet/cm/devicemanager the way kubelet's container manager
// does (the real registration server on <socket-dir>/kubelet.sock, the real plugin
// client, the real checkpoint, the "none" topology manager as the admit handler), watches
// the pods bound to its node in a real kube-apiserver, admits them one at a time as
// kubelet does (topologymanager.Admit -> devicemanager.Allocate per container), and then
// asks GetDeviceRunContainerOptions what each container would be started with.
//
// With --pod-resources-socket it also serves kubelet's pod-resources API v1 (kubelet's own
// server, podresources.go) and records what its Get says each admitted container holds.
//
// A rejected pod is marked Failed with kubelet's reason, as kubelet would.
//
// Every admission is printed as one JSON line on stdout (and appended to --results):
//
//	{"pod":"ns/name","uid":"...","admitted":true,"reason":"","message":"",
//	 "containers":[{"name":"c","devices":{"nvidia.com/gpu":["GPU-..::0"]},
//	   "envs":{"NVIDIA_VISIBLE_DEVICES":"GPU-.."},"cdiDevices":["nvidia.com/gpu=GPU-.."],
//	   "podResources":{"nvidia.com/gpu":["GPU-..::0"]}}]}
//
// The socket directory is a flag: kubelet's exported constructor hard-codes
// /var/lib/kubelet/device-plugins, so the unexported one (same code, a path argument)
// is reached through go:linkname instead of needing a private mount namespace.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"time"
	_ "unsafe" // go:linkname

	cadvisorapi "github.com/google/cadvisor/lib/model"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/kubelet/apis/podresources"
	"k8s.io/kubernetes/pkg/kubelet/cm/containermap"
	"k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"
)

//go:linkname newManagerImpl k8s.io/kubernetes/pkg/kubelet/cm/devicemanager.newManagerImpl
func newManagerImpl(logger klog.Logger, socketPath string, topology []cadvisorapi.Node,
	topologyAffinityStore topologymanager.Store) (*devicemanager.ManagerImpl, error)

// sourcesReady says the API source is ready once the pod informer has synced: until
// then kubelet's device manager must not drop checkpointed pods it has not seen yet.
type sourcesReady struct{ synced func() bool }

func (sourcesReady) AddSource(string) {}
func (s sourcesReady) AllReady() bool { return s.synced() }

type containerResult struct {
	Name       string              `json:"name"`
	Devices    map[string][]string `json:"devices"`
	Envs       map[string]string   `json:"envs"`
	CDIDevices []string            `json:"cdiDevices"`
	Error      string              `json:"error,omitempty"`
	// PodResources: what kubelet's pod-resources Get says the container holds
	PodResources map[string][]string `json:"podResources,omitempty"`
}

type admission struct {
	Pod        string            `json:"pod"`
	UID        string            `json:"uid"`
	Admitted   bool              `json:"admitted"`
	Reason     string            `json:"reason,omitempty"`
	Message    string            `json:"message,omitempty"`
	Containers []containerResult `json:"containers"`
}

func main() {
	klog.InitFlags(nil)
	socketDir := flag.String("socket-dir", "", "device plugin directory (kubelet.sock is served here)")
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the API server")
	node := flag.String("node", "", "the fake node's name")
	results := flag.String("results", "", "append one JSON line per admission here too")
	podResources := flag.String("pod-resources-socket", "", "serve kubelet's pod-resources API v1 here")
	flag.Parse()
	if *socketDir == "" || *kubeconfig == "" || *node == "" {
		fmt.Fprintln(os.Stderr, "usage: kubeletdm --socket-dir DIR --kubeconfig F --node NAME [--results F]")
		os.Exit(2)
	}
	if err := run(*socketDir, *kubeconfig, *node, *results, *podResources); err != nil {
		fmt.Fprintln(os.Stderr, "kubeletdm:", err)
		os.Exit(1)
	}
}

func run(socketDir, kubeconfig, node, resultsPath, podResourcesSocket string) error {
	logger := klog.Background()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}

	// kubelet's default: topology manager policy "none", scope "container"
	tm, err := topologymanager.NewManager(logger, nil, topologymanager.PolicyNone, "container", nil)
	if err != nil {
		return err
	}
	abs, err := filepath.Abs(socketDir)
	if err != nil {
		return err
	}
	dm, err := newManagerImpl(logger, filepath.Join(abs, "kubelet.sock"), nil, tm)
	if err != nil {
		return err
	}
	tm.AddHintProvider(logger, dm)

	queue := make(chan *v1.Pod, 1024)
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", node).String()
		}))
	podInformer := factory.Core().V1().Pods().Informer()
	var mu sync.Mutex
	rejected := map[string]bool{} // uid -> refused at admission (kubelet marks it Failed)
	// kubelet's active pods: every pod bound to the node that is neither terminal nor
	// rejected, admitted or still waiting (kubelet's pod manager holds a pod before its
	// admission); after a restart this keeps the checkpointed pods' devices allocated
	activePods := func() []*v1.Pod {
		mu.Lock()
		defer mu.Unlock()
		var out []*v1.Pod
		for _, obj := range podInformer.GetStore().List() {
			p := obj.(*v1.Pod)
			if rejected[string(p.UID)] || p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed {
				continue
			}
			out = append(out, p)
		}
		return out
	}
	if err := dm.Start(logger, activePods, sourcesReady{podInformer.HasSynced}, containermap.NewContainerMap(), sets.New[string]()); err != nil {
		return err
	}
	defer dm.Stop(logger) //nolint:errcheck
	if podResourcesSocket != "" {
		all := func() []*v1.Pod {
			var out []*v1.Pod
			for _, obj := range podInformer.GetStore().List() {
				out = append(out, obj.(*v1.Pod))
			}
			return out
		}
		srv, err := servePodResources(ctx, podResourcesSocket, podresources.PodResourcesProviders{
			Pods:             podsProvider{active: activePods, all: all},
			Devices:          devicesProvider{dm},
			Cpus:             noCPUs{},
			Memory:           noMemory{},
			DynamicResources: noDRA{},
		})
		if err != nil {
			return err
		}
		defer srv.Stop()
	}
	fmt.Fprintf(os.Stderr, "kubeletdm: serving %s for node %s\n", filepath.Join(abs, "kubelet.sock"), node)

	var out *os.File
	if resultsPath != "" {
		if out, err = os.OpenFile(resultsPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644); err != nil {
			return err
		}
		defer out.Close()
	}

	_, _ = podInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { queue <- obj.(*v1.Pod) },
	})
	factory.Start(ctx.Done())

	seen := map[string]bool{}
	for {
		select {
		case <-ctx.Done():
			return nil
		case pod := <-queue:
			if seen[string(pod.UID)] || pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed {
				continue
			}
			seen[string(pod.UID)] = true
			waitForResources(ctx, dm, pod)
			res := admit(ctx, tm, dm, pod, activePods())
			if res.Admitted && podResourcesSocket != "" {
				held, err := podResourcesOf(podResourcesSocket, pod.Namespace, pod.Name)
				for i := range res.Containers {
					if err != nil {
						res.Containers[i].Error = "pod-resources: " + err.Error()
						continue
					}
					res.Containers[i].PodResources = held[res.Containers[i].Name]
				}
			}
			if !res.Admitted {
				mu.Lock()
				rejected[string(pod.UID)] = true
				mu.Unlock()
				reject(ctx, cs, pod, res)
			}
			line, _ := json.Marshal(res)
			fmt.Println(string(line))
			if out != nil {
				_, _ = out.Write(append(line, '\n'))
			}
		}
	}
}

// waitForResources gives a (re)registering plugin up to 10 s to list healthy devices
// (kubelet's allocatable), the way a real node's pods wait for the plugin before kubelet
// admits them.
func waitForResources(ctx context.Context, dm *devicemanager.ManagerImpl, pod *v1.Pod) {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		_, allocatable, _ := dm.GetCapacity(klog.FromContext(ctx))
		missing := false
		for _, c := range pod.Spec.Containers {
			for name := range c.Resources.Limits {
				if q, ok := allocatable[name]; ok && q.Value() > 0 {
					continue
				}
				if isExtended(string(name)) {
					missing = true
				}
			}
		}
		if !missing {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func isExtended(name string) bool {
	for i := 0; i < len(name); i++ {
		if name[i] == '/' {
			return true
		}
	}
	return false
}

// reject records a failed admission on the pod as kubelet's rejectPod does: phase Failed
// with the admit handler's reason (UnexpectedAdmissionError for a failed Allocate).
func reject(ctx context.Context, cs kubernetes.Interface, pod *v1.Pod, res admission) {
	p := pod.DeepCopy()
	p.Status.Phase = v1.PodFailed
	p.Status.Reason = res.Reason
	p.Status.Message = "Pod was rejected: " + res.Message
	if _, err := cs.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		fmt.Fprintf(os.Stderr, "kubeletdm: recording rejection of %s/%s: %v\n", p.Namespace, p.Name, err)
	}
}

func admit(ctx context.Context, tm topologymanager.Manager, dm *devicemanager.ManagerImpl,
	pod *v1.Pod, others []*v1.Pod) admission {
	res := admission{Pod: pod.Namespace + "/" + pod.Name, UID: string(pod.UID)}
	verdict := tm.Admit(ctx, &lifecycle.PodAdmitAttributes{Pod: pod, OtherPods: others, Operation: lifecycle.AddOperation})
	res.Admitted, res.Reason, res.Message = verdict.Admit, verdict.Reason, verdict.Message
	if !verdict.Admit {
		return res
	}
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		cr := containerResult{Name: c.Name, Devices: map[string][]string{}, Envs: map[string]string{}}
		for resource, ids := range dm.GetDevices(string(pod.UID), c.Name) {
			for id := range ids {
				cr.Devices[resource] = append(cr.Devices[resource], id)
			}
			sort.Strings(cr.Devices[resource])
		}
		opts, err := dm.GetDeviceRunContainerOptions(ctx, pod, c)
		if err != nil {
			cr.Error = err.Error()
		} else if opts != nil {
			for _, e := range opts.Envs {
				cr.Envs[e.Name] = e.Value
			}
			for _, d := range opts.CDIDevices {
				cr.CDIDevices = append(cr.CDIDevices, d.Name)
			}
		}
		res.Containers = append(res.Containers, cr)
	}
	return res
}
