import os
import sys
import json

def main():
    pass
