// Command goclient times extender calls exactly as kube-scheduler's HTTPExtender makes
// them (k8s.io/kubernetes pkg/scheduler/extender.go, send): encoding/json.Marshal of the
// typed ExtenderArgs, a POST with net/http's keep-alive client, and
// json.NewDecoder(resp.Body).Decode into the typed result. What kube-scheduler waits for
// per extender call is all three, so the floor measured this way is the floor it sees.
//
// bench/latency.py --client go drives it over stdin/stdout, one JSON command per line:
//
//	{"nodes": [...]}                       the Node objects Nodes mode sends (once)
//	{"pod": {...}, "names": [...], "mode": "NodeNames"|"Nodes", "floor": false|true}
//	    filter with these candidates, then prioritize with the nodes filter passed (as
//	    kube-scheduler does), each request made from the objects just decoded; answers
//	    {"filter": s, "prioritize": s}. With "floor": the same, to /floor with
//	    X-Reply-Like: the floor answers with the very reply bytes of that verb, which
//	    are decoded and used alike (the client does the same work for both).
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"time"

	v1 "k8s.io/api/core/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

type command struct {
	Nodes []v1.Node `json:"nodes"`
	Pod   *v1.Pod   `json:"pod"`
	Names []string  `json:"names"`
	Mode  string    `json:"mode"`
	Floor bool      `json:"floor"`
}

type client struct {
	url    string
	http   *http.Client
	byName map[string]*v1.Node
}

// send is HTTPExtender.send, with an optional header for the floor.
func (c *client) send(action string, args interface{}, result interface{}, like string) error {
	out, err := json.Marshal(args)
	if err != nil {
		return err
	}
	req, err := http.NewRequest("POST", c.url+"/"+action, bytes.NewReader(out))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if like != "" {
		req.Header.Set("X-Reply-Like", like)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("failed %v with extender at URL %v, code %v", action, c.url, resp.StatusCode)
	}
	return json.NewDecoder(resp.Body).Decode(result)
}

// args is what HTTPExtender.Filter/Prioritize build: names when the extender is
// nodeCacheCapable, else the Node objects.
func (c *client) args(pod *v1.Pod, names []string, mode string) *extenderv1.ExtenderArgs {
	if mode == "NodeNames" {
		list := append([]string(nil), names...)
		return &extenderv1.ExtenderArgs{Pod: pod, NodeNames: &list}
	}
	nodes := &v1.NodeList{}
	for _, n := range names {
		nodes.Items = append(nodes.Items, *c.byName[n])
	}
	return &extenderv1.ExtenderArgs{Pod: pod, Nodes: nodes}
}

// pair is kube-scheduler's sequence for one pod: filter with the candidates, then
// prioritize with the nodes filter passed, unless one node passed (schedulePod takes it
// without scoring). To the floor (“floor“), the very same: the floor answers with the
// last reply of each verb, which is decoded, and whose passing nodes make the
// prioritize request, exactly as for the extender's own replies.
func (c *client) pair(cmd command, floor bool) (float64, float64, error) {
	filterAt, prioritizeAt, filterLike, prioritizeLike := "filter", "prioritize", "", ""
	if floor {
		filterAt, prioritizeAt, filterLike, prioritizeLike = "floor", "floor", "filter", "prioritize"
	}
	var filtered extenderv1.ExtenderFilterResult
	t := time.Now()
	if err := c.send(filterAt, c.args(cmd.Pod, cmd.Names, cmd.Mode), &filtered, filterLike); err != nil {
		return 0, 0, err
	}
	tFilter := time.Since(t).Seconds()
	var passed []string
	if filtered.NodeNames != nil {
		passed = *filtered.NodeNames
	} else if filtered.Nodes != nil {
		for _, n := range filtered.Nodes.Items {
			passed = append(passed, n.Name)
		}
	}
	if len(passed) == 1 {
		return tFilter, 0, nil
	}
	var scores extenderv1.HostPriorityList
	t = time.Now()
	if err := c.send(prioritizeAt, c.args(cmd.Pod, passed, cmd.Mode), &scores, prioritizeLike); err != nil {
		return 0, 0, err
	}
	return tFilter, time.Since(t).Seconds(), nil
}

func main() {
	c := &client{url: os.Args[1], http: &http.Client{Timeout: 120 * time.Second},
		byName: map[string]*v1.Node{}}
	in := bufio.NewReaderSize(os.Stdin, 1<<20)
	out := json.NewEncoder(os.Stdout)
	for {
		line, err := in.ReadBytes('\n')
		if len(line) == 0 && err != nil {
			return
		}
		var cmd command
		if err := json.Unmarshal(line, &cmd); err != nil {
			fmt.Fprintln(os.Stderr, "goclient:", err)
			os.Exit(2)
		}
		answer := map[string]float64{}
		if cmd.Nodes != nil {
			for i := range cmd.Nodes {
				c.byName[cmd.Nodes[i].Name] = &cmd.Nodes[i]
			}
			answer["nodes"] = float64(len(cmd.Nodes))
		} else {
			answer["filter"], answer["prioritize"], err = c.pair(cmd, cmd.Floor)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "goclient:", err)
			os.Exit(1)
		}
		if err := out.Encode(answer); err != nil {
			os.Exit(1)
		}
	}
}
