module example.com/lib/cmd/watermill-inbox

go 1.26.0
