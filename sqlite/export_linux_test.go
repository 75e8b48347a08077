package sqlite

var ParseTimensOffsets = parseTimensOffsets
