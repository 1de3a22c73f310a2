package cluster

// NewConnectingWith is NewConnecting with the store's opening given.
var NewConnectingWith = newConnecting
