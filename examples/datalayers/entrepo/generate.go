package entrepo

//go:generate go run entc.go
