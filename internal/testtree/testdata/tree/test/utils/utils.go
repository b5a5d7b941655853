// Package utils is a library of the tree, not a main package.
package utils

// Answer is here so the package has something in it.
const Answer = 42
