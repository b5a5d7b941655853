#!/usr/bin/env bash
echo hack
