"""The tests, one package per folder: a test module is named tests.<folder>.<file> (two folders
may hold files of one name), and a folder's modules import each other relatively."""
