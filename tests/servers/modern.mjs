#!/usr/bin/env node
// A 2026-07-28 MCP server written with @modelcontextprotocol/server 2.x: one of every kind the modern
// era has (plain, structured, progress, MRTR elicitation and sampling tools, a resource, a prompt,
// a subscription source, logging). `--legacy reject` serves only the modern era; by default the SDK serves
// both (and bridges legacy clients itself).
import { McpServer, inputRequired, inputResponse, acceptedContent } from '@modelcontextprotocol/server';
import { serveStdio } from '@modelcontextprotocol/server/stdio';
import * as z from 'zod';

const legacy = process.argv.includes('--legacy') ? process.argv[process.argv.indexOf('--legacy') + 1] : 'serve';
const name = process.env.MODERN_NAME ?? 'modern-test';

function build() {
    const server = new McpServer(
        { name, version: '2.0.0' },
        {
            capabilities: { tools: { listChanged: true }, resources: { subscribe: true, listChanged: true }, prompts: {}, logging: {} },
            instructions: 'A modern test server.',
            cacheHints: { 'tools/list': { ttlMs: 60000, cacheScope: 'public' } },
        },
    );
    server.registerTool('echo', { description: 'Echo a message', inputSchema: z.object({ message: z.string() }) },
        async ({ message }) => ({ content: [{ type: 'text', text: `Echo: ${message}` }] }));
    server.registerTool('add', {
        description: 'Add two numbers',
        inputSchema: z.object({ a: z.number(), b: z.number() }),
        outputSchema: z.object({ sum: z.number() }),
    }, async ({ a, b }) => ({ content: [{ type: 'text', text: String(a + b) }], structuredContent: { sum: a + b } }));
    server.registerTool('count', { description: 'Count to n with progress', inputSchema: z.object({ n: z.number() }) },
        async ({ n }, ctx) => {
            const token = ctx.mcpReq._meta?.progressToken;
            for (let i = 1; i <= n; i++) {
                if (token !== undefined)
                    await ctx.mcpReq.notify({ method: 'notifications/progress', params: { progressToken: token, progress: i, total: n } });
                await new Promise(r => setTimeout(r, 20));
            }
            return { content: [{ type: 'text', text: `counted to ${n}` }] };
        });
    server.registerTool('ask', { description: 'Ask the user a question (MRTR elicitation)', inputSchema: z.object({ question: z.string() }) },
        async ({ question }, ctx) => {
            const answer = acceptedContent(ctx.mcpReq.inputResponses, 'answer');
            if (!answer)
                return inputRequired({
                    inputRequests: {
                        answer: inputRequired.elicit({
                            message: question,
                            requestedSchema: { type: 'object', properties: { answer: { type: 'string' } }, required: ['answer'] },
                        }),
                    },
                    requestState: `ask:${question}`,
                });
            return { content: [{ type: 'text', text: `${ctx.mcpReq.requestState()} -> ${answer.answer}` }] };
        });
    // Progress in both rounds of one call: 1 of 2 before it asks (MRTR elicitation), 2 of 2 once answered.
    server.registerTool('ask-progress', { description: 'Report progress, ask the user, report progress again', inputSchema: z.object({}) },
        async (_args, ctx) => {
            const token = ctx.mcpReq._meta?.progressToken;
            const progress = async (n, message) => {
                if (token !== undefined)
                    await ctx.mcpReq.notify({ method: 'notifications/progress', params: { progressToken: token, progress: n, total: 2, message } });
            };
            const answer = acceptedContent(ctx.mcpReq.inputResponses, 'answer');
            if (!answer) {
                await progress(1, 'before');
                return inputRequired({
                    inputRequests: {
                        answer: inputRequired.elicit({
                            message: 'go on?',
                            requestedSchema: { type: 'object', properties: { answer: { type: 'string' } }, required: ['answer'] },
                        }),
                    },
                });
            }
            await progress(2, 'after');
            return { content: [{ type: 'text', text: `answered ${answer.answer}` }] };
        });
    server.registerTool('think', { description: 'Ask the client model (MRTR sampling)', inputSchema: z.object({ prompt: z.string() }) },
        async ({ prompt }, ctx) => {
            const v = inputResponse(ctx.mcpReq.inputResponses, 'llm');
            if (v.kind !== 'sampling')
                return inputRequired({
                    inputRequests: {
                        llm: inputRequired.createMessage({ messages: [{ role: 'user', content: { type: 'text', text: prompt } }], maxTokens: 50 }),
                    },
                });
            return { content: [{ type: 'text', text: `model said: ${v.result.content.text}` }] };
        });
    server.registerResource('greeting', 'modern://greeting', { mimeType: 'text/plain', description: 'A greeting' },
        async uri => ({ contents: [{ uri: uri.href, mimeType: 'text/plain', text: 'hello from the modern era' }] }));
    server.registerPrompt('greet', { description: 'Greet someone', argsSchema: z.object({ who: z.string() }) },
        ({ who }) => ({ messages: [{ role: 'user', content: { type: 'text', text: `Say hello to ${who}` } }] }));
    // Logging: in the modern era at the request's logLevel, in the handshake era at setLevel's.
    server.registerTool('log', { description: 'Log at info and at debug', inputSchema: z.object({ message: z.string() }) },
        async ({ message }, ctx) => {
            await ctx.mcpReq.log('debug', `debug: ${message}`);
            await ctx.mcpReq.log('info', `info: ${message}`);
            return { content: [{ type: 'text', text: 'logged' }] };
        });
    // A subscription source: a tool that announces a tools list change and an update of the resource.
    server.registerTool('touch', { description: 'Announce changes to subscribers' }, async () => {
        server.sendToolListChanged();
        await server.server.sendResourceUpdated({ uri: 'modern://greeting' });
        return { content: [{ type: 'text', text: 'touched' }] };
    });
    return server;
}

serveStdio(build, { legacy });
