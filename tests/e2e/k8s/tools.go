//go:build tools

// Package tools pins the Kubernetes commands the e2e harness builds, so that go.mod and
// go.sum keep their dependencies. Build them with:
//
//	go build -o bin/kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver
//	go build -o bin/kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
)
