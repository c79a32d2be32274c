// Command etcd runs etcd's own main at the version k8s.io/kubernetes pins.
//
// It is what etcd's root main.go does; building it from this module keeps the
// etcd server in the same module graph as the apiserver that talks to it.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
