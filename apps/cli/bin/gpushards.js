#!/usr/bin/env node
// A committed entry point, so that `npm ci` links node_modules/.bin/gpushards before the build
// has made dist/ (npm skips a bin whose file is missing, and then `npx gpushards` fails).
import '../dist/main.js';
