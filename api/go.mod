module github.com/guestlink/guestlink/api

go 1.26.0
