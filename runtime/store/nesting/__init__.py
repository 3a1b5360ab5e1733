"""Nesting verification: learning a slice's widths and proving them value by value (`discover`),
reading tensors from a folder or the hub (`tensor_source`), the app's and CLI's check (`slice_check`,
`cli`)."""
