module example.com/lib/contrib/thing

go 1.26.0
