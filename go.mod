module gateway

go 1.26
