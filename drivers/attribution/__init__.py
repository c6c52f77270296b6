"""Which pod owns a GPU process: host PID to cgroup to pod UID."""
