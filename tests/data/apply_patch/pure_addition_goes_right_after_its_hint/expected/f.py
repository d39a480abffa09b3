import os
import re
import sys
